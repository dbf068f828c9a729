"""Sphinx configuration: the Markdown pages of docs/ and an API reference from pld's numpy-style docstrings."""

from __future__ import annotations

import pld

project = "pld"
author = "pld maintainers"
copyright = "2026, pld maintainers"  # noqa: A001  (Sphinx's name)
release = pld.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
# the README is the front page of the repository; the pages link to it and to files of the tree
suppress_warnings = ["myst.xref_missing"]

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}

html_theme = "alabaster"
html_title = f"pld {release}"
