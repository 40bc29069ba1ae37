"""Text shown or exported safely: untrusted Markdown rendered to sanitised HTML and word
diffs (``view``), and CSV that spreadsheets cannot execute (``csvsafe``)."""
