"""What every test tier shares: waits, free ports, tools a tier needs, broker cleanup, fakes.

Importable as ``support`` from any tier: ``tests/conftest.py`` puts ``tests/`` on the path
(pytest's rootdir-relative import of a conftest without a package). A tier's own helpers
stay in its folder (``tests/<tier>/*_support.py``).
"""
