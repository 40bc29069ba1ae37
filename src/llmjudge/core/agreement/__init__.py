"""Agreement, pure: of a judge with reference labels, and of people with each other
(``judges``)."""
