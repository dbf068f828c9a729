"""Saved PLDs: exact round trips, inspection grids, and clear errors for bad files."""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest

import pld
from pld import io as pio


@pytest.fixture(scope="module")
def small():
    """A cheap heterogeneous composition with both directions (Poisson + PMFs)."""
    return (pld.PoissonSampled(pld.Gaussian(2.0), 0.05).pld().self_compose(10)
            .compose(pld.FromPMFs((0.5, 0.5), (0.4, 0.6)).pld()))


@pytest.fixture(scope="module")
def saved(small, tmp_path_factory):
    path = tmp_path_factory.mktemp("io") / "small.pld"
    pio.save(small, path, delta=1e-5)
    return path


def test_round_trip_is_exact(small, saved):
    loaded = pld.load(saved)
    assert isinstance(loaded, pld.PLD)
    assert loaded.components == small.components
    assert loaded.epsilon_bounds(1e-5) == small.epsilon_bounds(1e-5)
    # composing on top of a stored result is the same as composing the original
    extra = pld.Laplace(4.0).pld()
    assert loaded.compose(extra).components == small.compose(extra).components


def test_file_keeps_the_name_and_has_versioned_metadata_and_grids(small, saved):
    assert os.path.basename(saved) == "small.pld"  # no ".npz" appended
    info = pio.read_info(saved)
    assert info["format"] == pio.FORMAT and info["version"] == pio.VERSION
    assert info["pld_version"] == pld.__version__
    assert info["steps"] == small.steps and info["symmetric"] is False
    assert [c["count"] for c in info["components"]] == [k for _, k in small.components]
    first = info["components"][0]["mechanism"]
    assert first == {"type": "PoissonSampled",
                     "fields": {"mechanism": {"type": "Gaussian", "fields": {"sigma": 2.0, "sensitivity": 1.0}},
                                "sampling_rate": 0.05}}
    arrays = info["arrays"]
    for d in ("remove", "add"):
        for side in ("upper", "lower"):
            losses = arrays[f"{d}_{side}_losses"]
            masses = arrays[f"{d}_{side}_masses"]
            assert losses.shape == masses.shape and losses.size > 10
            assert np.all(np.diff(losses) > 0) and np.all(masses >= 0)
            meta = info["grids"]["arrays"][f"{d}_{side}"]
            assert meta["points"] == losses.size and 0 <= meta["infinity_mass"] < 1e-3
            # the stored grid is what the engine returns for that query
            ref = small.distribution(d, side, delta=1e-5)
            np.testing.assert_array_equal(losses, ref[0])
            np.testing.assert_array_equal(masses, ref[1])
    assert info["grids"]["delta"] == 1e-5


def test_nested_and_fixed_spacing_round_trip(tmp_path):
    d = pld.PLD([(pld.PoissonSampled(pld.PoissonSampled(pld.Laplace(3.0, 2.0), 0.5), 0.1), 7),
                 (pld.PoissonSampled(pld.Gaussian(1.5, 0.5), 0.2), 3),
                 (pld.DiscreteLaplace(2.0, 3), 1), (pld.ApproxDP(0.1, 1e-9), 2), (pld.PureDP(0.3), 1)],
                value_discretization_interval=1e-3)
    back = pio.from_bytes(pio.to_bytes(d, delta=None))
    assert back.components == d.components
    assert pio._fixed_spacing(back) == 1e-3
    blob = pio.to_bytes(d, delta=None)
    assert pld.load.__module__ == "pld.io"
    p = tmp_path / "x.npz"
    p.write_bytes(blob)
    assert pld.load(p).components == d.components


def test_mechanism_dicts_match_the_accountant_encoding():
    m = pld.PoissonSampled(pld.Gaussian(1.1), 0.01)
    dct = pio.mechanism_to_dict(m)
    assert pio.mechanism_from_dict(json.loads(json.dumps(dct))) == m
    try:
        from pld.accounting.accountant import mechanism_from_dict, mechanism_to_dict
    except ImportError:
        return
    assert mechanism_to_dict(m) == dct
    assert mechanism_from_dict(dct) == m


def _rewrite(blob: bytes, meta_update=None, drop_metadata=False, raw_metadata=None) -> bytes:
    """Rebuild a saved file with edited metadata."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["metadata"].tobytes())
    if meta_update:
        meta_update(meta)
    if drop_metadata:
        del arrays["metadata"]
        arrays["other"] = np.zeros(3)
    else:
        text = raw_metadata if raw_metadata is not None else json.dumps(meta).encode()
        arrays["metadata"] = np.frombuffer(text, dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


@pytest.fixture(scope="module")
def blob():
    return pio.to_bytes(pld.PoissonSampled(pld.Gaussian(1.0), 0.1).pld().self_compose(3), delta=None)


def test_corrupted_truncated_and_foreign_files(saved, tmp_path, blob):
    data = saved.read_bytes()
    cases = {
        "truncated.pld": data[: len(data) // 2],
        "empty.pld": b"",
        "text.pld": b"hello, I am not a PLD\n" * 10,
        "flipped.pld": data[:200] + bytes([data[200] ^ 0xFF]) + data[201:],
    }
    for name, content in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(ValueError, match="not a pld file"):
            pld.load(p)
    # a CRC error deep inside a grid array is caught too (every member is read)
    mid = bytearray(data)
    mid[len(data) // 3] ^= 0xFF
    (tmp_path / "mid.pld").write_bytes(bytes(mid))
    with pytest.raises(ValueError, match="not a pld file"):
        pld.load(tmp_path / "mid.pld")
    # a valid .npz that is not ours
    other = tmp_path / "other.npz"
    np.savez(other, x=np.arange(3))
    with pytest.raises(ValueError, match="not a pld file.*no metadata"):
        pld.load(other)
    # a zip that is not an npz
    z = tmp_path / "z.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("metadata.npy", b"garbage")
    with pytest.raises(ValueError, match="not a pld file"):
        pld.load(z)
    with pytest.raises(FileNotFoundError):
        pld.load(tmp_path / "does-not-exist.pld")


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(format="something-else"), "not a pld file"),
    (lambda m: m.update(version=99), "unsupported version 99"),
    (lambda m: m.pop("version"), "not a pld file.*no format version"),
    (lambda m: m.update(components=[]), "not a pld file.*no components"),
    (lambda m: m["components"][0].update(count=0), "components\\[0\\].count"),
    (lambda m: m["components"][0]["mechanism"].update(type="os.system"), "unknown mechanism class 'os.system'"),
    (lambda m: m["components"][0]["mechanism"].update(type="Mechanism"), "unknown mechanism class 'Mechanism'"),
    (lambda m: m["components"][0]["mechanism"]["fields"].update(evil=1), "has no field"),
    (lambda m: m["components"][0]["mechanism"]["fields"].update(sampling_rate=5.0), "cannot rebuild"),
    (lambda m: m["components"][0]["mechanism"]["fields"]["mechanism"].update(type="GridPLD"), "unknown mechanism"),
    (lambda m: m.update(value_discretization_interval=-1), "value_discretization_interval"),
])
def test_bad_metadata_is_a_clear_value_error(blob, edit, message):
    bad = _rewrite(blob, edit)
    with pytest.raises(ValueError, match=message):
        pio.from_bytes(bad)


def test_bad_metadata_encoding(blob):
    with pytest.raises(ValueError, match="no metadata"):
        pio.from_bytes(_rewrite(blob, drop_metadata=True))
    with pytest.raises(ValueError, match="metadata is not JSON"):
        pio.from_bytes(_rewrite(blob, raw_metadata=b"\x00{not json"))
    with np.load(io.BytesIO(blob)) as z:
        arrays = {"metadata": z["metadata"].astype(np.float64)}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with pytest.raises(ValueError, match="metadata has the wrong type"):
        pio.from_bytes(buf.getvalue())


def test_save_is_atomic_and_checks_its_input(tmp_path, blob):
    target = tmp_path / "keep.pld"
    target.write_bytes(blob)
    d = pld.Gaussian(3.0).pld()
    with pytest.raises(ValueError):
        pio.save(d, target, delta=2.0)  # fails before writing
    assert target.read_bytes() == blob  # old content untouched
    with pytest.raises(TypeError):
        pio.save("not a pld", tmp_path / "x.pld")
    with pytest.raises(OSError):
        pio.save(d, tmp_path / "no-such-dir" / "x.pld", delta=None)
    assert sorted(os.listdir(tmp_path)) == ["keep.pld"]  # no temporary files left behind
    pio.save(d, target, delta=None)
    assert pld.load(target).components == d.components
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~pio._umask()  # not mkstemp's 0600


def test_a_queried_pld_pickles_and_answers_the_same():
    # (its engine's caches hold locks: a PLD sent to a worker process after a query failed to
    # pickle; only what it is travels, and the grids are built anew on the other side)
    import pickle

    for d in (pld.dpsgd(1.0, 0.01, 150), pld.dpsgd(1.0, 0.01, 150, sampling="balls_in_bins")):
        before = d.epsilon_bounds(1e-5)
        back = pickle.loads(pickle.dumps(d))
        assert back.components == d.components and back.epsilon_bounds(1e-5) == before
