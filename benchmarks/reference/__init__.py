"""Independent reference table for composed DP-SGD accounting (docs/reference-oracle.md).

``oracle`` is a separate certified accountant that shares no code with pld; ``build`` runs it
over the settings of ``settings`` and writes ``dpsgd_table.json``.
"""
