"""What the test modules share besides conftest.py: finding the installed models, and writing
the files some tests read. Imported as ``helpers.<module>`` (pytest puts tests/ on sys.path,
as it does for conftest and impls)."""
