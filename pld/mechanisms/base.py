"""The mechanism contract: what every mechanism declares and provides (see :class:`Mechanism`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pld.mechanisms.models import LossModelProtocol

_EMPTY = np.array([], dtype=float)


_PLD_MECHANISMS: dict[str, type] = {}


#: the PLD type, registered by pld.distribution when it is imported (it imports
#: this module, so this module cannot import it: mechanisms describe pairs and
#: know nothing of grids; ``pld()`` is only a convenience)
_PLD_TYPE: list[Any] = []


def register_pld_type(cls: type) -> None:
    """Make ``mechanism.pld()`` build instances of ``cls`` (called by pld.distribution)."""
    _PLD_TYPE[:] = [cls]


class Mechanism:
    """Base class.  Subclasses are frozen dataclasses.

    Contract: a subclass declares, as class attributes, properties or fields,

    * ``adjacency``: the neighbouring relation of its pair (one of
      :data:`pld.mechanisms.adjacency.RELATIONS`), and
    * ``symmetric``: True only if the ``add`` direction's PLD equals the
      ``remove`` direction's (then only ``remove`` is evaluated),

    and implements ``loss_model(direction)``.  Neither has a default: a new
    asymmetric pair that forgot to say so would silently lose its ``add``
    direction, so a subclass that declares neither is refused when defined.
    """

    adjacency: str
    symmetric: bool
    #: whether the pair the engine composes is the mechanism's *tight*
    #: dominating pair, so that both ends of a bracket bound the mechanism.
    #: A mechanism known only through a dominating pair that is not tight (a
    #: derived or block bound) says False and names, in :meth:`bound_parts`,
    #: the composition that bounds it from above and a dominated construction
    #: of the true mechanism (a post-processing of it, or a concrete pair of
    #: neighbouring datasets) that bounds it from below
    tight: bool = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        missing = [name for name in ("adjacency", "symmetric") if not hasattr(cls, name)]
        if missing:
            raise TypeError(f"mechanism {cls.__name__} must declare {' and '.join(missing)} "
                            "(see pld.mechanisms.Mechanism)")
        if cls.__module__.split(".")[0] == "pld":
            # pld's own mechanisms, by name: what saved files may name (pld.io)
            _PLD_MECHANISMS[cls.__name__] = cls

    @staticmethod
    def pld_classes() -> dict[str, type]:
        """pld's own mechanism classes by name (those defined in ``pld.*`` modules)."""
        return dict(_PLD_MECHANISMS)

    def loss_model(self, direction: str) -> LossModelProtocol:  # pragma: no cover - abstract
        raise NotImplementedError

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        """``(upper, lower)``: compositions ``((mechanism, count), ...)`` of tight
        pairs whose epsilon bounds this mechanism's from above and from below.

        A tight mechanism is its own bound both ways.  One that is not
        (:attr:`tight` False) returns a dominating composition and a
        dominated one, or None for the lower when no dominated construction is
        known (the lower end of a bracket is then 0).  Every part returned
        must be tight.
        """
        return ((self, 1),), ((self, 1),)

    def lower_alternatives(self) -> tuple[tuple, ...]:
        """Other dominated compositions than ``bound_parts()[1]``, each a valid lower end of its
        own (a bracket's lower end is the largest of their answers; which is largest depends on
        the query).  Default: none."""
        return ()

    def bound_notes(self) -> dict[str, str]:
        """What the two ends of a bracket bound, in words (reports, ``explain()``)."""
        if self.tight:
            return {"upper": "the tight dominating pair (dominating discretisation)",
                    "lower": "the tight dominating pair (dominated discretisation)"}
        raise NotImplementedError  # pragma: no cover - a non-tight mechanism states its constructions

    def tv_upper(self) -> float | None:
        """Upper bound on the total variation of the pair (both directions), or
        None when there is no closed form (:mod:`pld.engine.total_variation`)."""
        return None

    def gaussian_mu(self) -> float | None:
        """``mu`` when the pair is exactly a Gaussian pair ``N(mu, 1)`` vs
        ``N(0, 1)`` (closed forms apply, :mod:`pld.engine.gaussian_exact`), else None."""
        return None

    def pld(self, *, value_discretization_interval: float | None = None) -> Any:
        """The privacy loss distribution of one run of this mechanism.

        Parameters
        ----------
        value_discretization_interval : float, optional
            Fixed grid spacing for experts; by default the spacing is chosen per
            query so that the epsilon bracket is narrow.

        Returns
        -------
        pld.PLD
            One run (``count = 1``); compose with ``self_compose``/``compose``.
        """
        return _PLD_TYPE[0].from_mechanism(self, value_discretization_interval=value_discretization_interval)

    # helpers ---------------------------------------------------------------
    @staticmethod
    def _check_direction(direction: str) -> None:
        if direction not in ("remove", "add"):
            raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")
