"""Neighbouring relations: which pairs of datasets a guarantee is about.

Every mechanism declares the relation its dominating pair is built for
(:attr:`pld.mechanisms.Mechanism.adjacency`), and a :class:`pld.PLD` composes
only mechanisms under one relation: privacy losses about different pairs of
datasets do not add up to a guarantee for either.

* ``ADD_OR_REMOVE``: neighbours differ by one record added or removed (the
  dataset size is private).  Two directions: ``remove`` (P on the larger
  dataset, Q on the smaller) and ``add`` (the pair swapped).
* ``SUBSTITUTE``: neighbours have the same size and differ in one record
  replaced by another.
* ``REPLACE_SPECIAL``: one record replaced by a special (zero) record that
  still counts towards the size (dp_accounting's ``REPLACE_SPECIAL``).  A
  special record contributes nothing to the sums pld's subsampled pairs are
  built for, so the output on it is the output without the record: an
  add-or-remove pair is also a pair for this relation, and the two compose
  (into ``REPLACE_SPECIAL``), as in dp_accounting.
* ``ANY``: a pair stated through a sensitivity or a privacy parameter
  (Gaussian, Laplace, randomized response, ...): it holds under whichever
  relation that sensitivity or parameter was derived for, so it composes with
  every relation.
"""

from __future__ import annotations

ADD_OR_REMOVE = "add_or_remove"
SUBSTITUTE = "substitute"
REPLACE_SPECIAL = "replace_special"
ANY = "any"

#: every relation a mechanism may declare
RELATIONS = (ADD_OR_REMOVE, SUBSTITUTE, REPLACE_SPECIAL, ANY)

#: how reports name each relation
DESCRIPTIONS = {
    ADD_OR_REMOVE: "add-or-remove one record",
    SUBSTITUTE: "substitute one record (same dataset size)",
    REPLACE_SPECIAL: "replace one record by a special record (same dataset size)",
    ANY: "the relation the mechanism's sensitivity is stated for",
}


def combined(relations) -> str:
    """The one relation of a composition whose parts declare ``relations``.

    ``ANY`` parts take the relation of the others.  Raises ``ValueError``
    naming both when two parts declare different relations.
    """
    found = ANY
    for r in relations:
        if r not in RELATIONS:
            raise ValueError(f"adjacency must be one of {RELATIONS}, got {r!r}")
        if r == ANY or r == found:
            continue
        if found == ANY:
            found = r
        elif {found, r} == {ADD_OR_REMOVE, REPLACE_SPECIAL}:
            found = REPLACE_SPECIAL
        else:
            raise ValueError(f"cannot compose mechanisms under different neighbouring relations: "
                             f"{found!r} and {r!r}")
    return found


def of_components(components: tuple) -> str:
    """The one neighbouring relation of a composition's ``(mechanism, count)`` parts
    (:func:`combined`), or ``ValueError`` naming two mechanisms whose relations differ."""
    relation, witness = ANY, None
    for m, _ in components:
        try:
            new = combined((relation, m.adjacency))
        except ValueError:
            raise ValueError(
                f"cannot compose PLDs under different neighbouring relations: {witness!r} is accounted "
                f"under {relation} adjacency and {m!r} under {m.adjacency} adjacency; a guarantee holds "
                "for one relation at a time (account every part under the same one)") from None
        if new != relation:
            relation, witness = new, m
    return relation
