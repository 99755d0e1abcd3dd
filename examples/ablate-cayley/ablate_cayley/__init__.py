"""An ablate plug-in package: ``cayley``, rotation heads whose orthogonal basis is the Cayley
transform of a skew matrix, and ``parity``, the parity of a bit string (docs/plugins.md).

Kept free of imports: ablate reads the entry points without importing the modules they name, and
hashes each module's source to tell its versions apart.
"""
