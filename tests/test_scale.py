"""Scale: big tapes and big arrays, metadata per record, amortised growth.

The two big runs (a tape of 10 million records, a graph over arrays of 100
million elements) take tens of seconds and several GB: they run only with
``TAPEGRAD_SCALE=1`` and print their time and peak memory (``-s`` shows it).
The metadata and growth checks are cheap and run always.
"""
import os
import resource
import time

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.core.tape import current

from oracle import in_fresh_thread

big = pytest.mark.skipif(os.environ.get("TAPEGRAD_SCALE") != "1",
                         reason="big: set TAPEGRAD_SCALE=1 (minutes, several GB)")


def _peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def metadata_bytes(tape):
    """Bytes of the tape's per-record arrays and the arrays they index."""
    return sum(getattr(tape, k).nbytes for k in
               ("op", "arg0", "size", "ip0", "fp", "v1", "rix", "freed", "args", "ip", "vals"))


def _scalar_chain(n, a=1.0 + 1e-8):
    x = tg.tensor(1.0, requires_grad=True)
    h = x
    for _ in range(n):
        h = h * a
    return x, h


def test_metadata_bytes_per_record():
    """One-parent scalar records cost 65 bytes of arrays each (8 int64/float64
    fields, a bool, one parent id), at most twice that with the slack that
    doubling leaves; a record's value costs nothing more when it fits in v1."""
    def run():
        tape = current()
        x, y = _scalar_chain(100_000)
        n = tape.n
        per_record = metadata_bytes(tape) / n
        used = (8 * 7 + 1) * n + 8 * (tape.na + tape.ni + tape.nv)  # excluding slack
        assert n >= 100_000
        assert per_record <= 2 * 65 + 16, per_record
        assert used / n <= 66
        return per_record
    in_fresh_thread(run)


def _per_record_seconds(n):
    def run():
        t0 = time.perf_counter()
        _scalar_chain(n)
        return (time.perf_counter() - t0) / n
    return min(in_fresh_thread(run) for _ in range(3))


def test_growth_is_amortised():
    """Recording 8x as many records costs about the same per record: the
    arrays double (no quadratic copying) and compaction runs only when the
    tape has doubled.  The factor is generous: the machine is shared."""
    small, large = _per_record_seconds(30_000), _per_record_seconds(240_000)
    assert large < 3.0 * small, (small, large)


@big
def test_ten_million_records():
    def run():
        t0 = time.perf_counter()
        x, y = _scalar_chain(10_000_000)
        t_rec = time.perf_counter() - t0
        tape = current()
        n, meta = tape.n, metadata_bytes(tape)
        t1 = time.perf_counter()
        y.backward()
        t_bwd = time.perf_counter() - t1
        np.testing.assert_allclose(x.grad.item(), (1.0 + 1e-8) ** 10_000_000, rtol=1e-9)
        return n, meta, t_rec, t_bwd
    n, meta, t_rec, t_bwd = in_fresh_thread(run)
    assert n >= 10_000_000
    print(f"\n10M-record tape: {n} records, {meta / 2**20:.0f} MiB of tape arrays "
          f"({meta / n:.1f} B/record), recording {t_rec:.1f} s, backward {t_bwd:.2f} s, "
          f"peak RSS {_peak_mb():.0f} MB")


@big
def test_hundred_million_elements():
    def run():
        n = 100_000_000
        t0 = time.perf_counter()
        x = tg.tensor(np.full(n, 0.5), requires_grad=True)
        y = (tg.sin(x) * x).sum()
        t_fwd = time.perf_counter() - t0
        t1 = time.perf_counter()
        y.backward()
        t_bwd = time.perf_counter() - t1
        g = x.grad.numpy()
        want = np.cos(0.5) * 0.5 + np.sin(0.5)
        assert g.shape == (n,)
        np.testing.assert_allclose(g[[0, n // 2, n - 1]], want, rtol=1e-14)
        assert abs(g.mean() - want) < 1e-12
        np.testing.assert_allclose(y.item(), n * 0.5 * np.sin(0.5), rtol=1e-9)
        return t_fwd, t_bwd
    t_fwd, t_bwd = in_fresh_thread(run)
    print(f"\n1e8-element graph: forward {t_fwd:.1f} s, backward {t_bwd:.1f} s, "
          f"peak RSS {_peak_mb():.0f} MB")
