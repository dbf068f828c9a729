"""Adapters that let other privacy tools use pld as their accounting backend.

Each adapter lives in its own submodule and imports its peer library only when
that submodule is imported (or, for Opacus, when the accountant class is first
used), so ``import pld`` and ``import pld.interop`` never pull in
``dp_accounting``, ``opacus`` or ``torch``:

* :mod:`pld.interop.dp_accounting` -- ``from_dp_event(event)`` converts a
  ``dp_accounting.DpEvent`` tree into a :class:`pld.PLD`, and
  ``PLDAccountant`` is a drop-in ``dp_accounting.PrivacyAccountant``::

      from pld.interop.dp_accounting import PLDAccountant
      accountant = PLDAccountant()          # was: dp_accounting.pld.PLDAccountant()

* :mod:`pld.interop.opacus` -- ``PLDOpacusAccountant`` implements Opacus's
  accountant interface (``opacus.accountants.IAccountant``)::

      from pld.interop.opacus import PLDOpacusAccountant
      privacy_engine = PrivacyEngine()
      privacy_engine.accountant = PLDOpacusAccountant()   # before make_private(...)
"""

# Submodules are deliberately not imported (nor listed in __all__) here.
__all__: list[str] = []
