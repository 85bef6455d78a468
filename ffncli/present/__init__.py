"""Results to people and programs: Rich tables and one JSON document per command (``console``,
``params``, ``run``, ``check``, ``stats``), JUnit XML (``junit``), and one self-contained HTML
page (``svg``, ``report``). Computes nothing; Rich is imported on first use."""
