"""Personas, the pure part of the calibration loop: content keys (``keys``), the stable
training splits (``splits``), agreement metrics (``metrics``), when a persona is trained
(``convergence``), the CI gate (``gate``), what the loop says to the judge and the prompt
engineer (``replies``), the embedding-similarity judge (``similarity``) and starter
templates (``templates``)."""
