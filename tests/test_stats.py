"""tg.tape_stats(): the numbers add up and follow the tape."""
import numpy as np
import pytest

import tapegrad as tg
from oracle import in_fresh_thread, leaf


def test_counts_and_bytes_add_up():
    def f():
        x = leaf(np.arange(1.0, 101.0))          # a large value (kept by exp)
        s = leaf([1.0, 2.0, 3.0])                # a small one (arena)
        y = tg.exp(x).sum() + (s * s).sum()
        y.register_hook(lambda g: None)
        st = tg.tape_stats()
        other = tg.cos(s)                        # another graph keeps the tape
        y.backward()
        after = tg.tape_stats()
        return st, after, other
    st, after, y = in_fresh_thread(f)
    assert st["records"] == sum(st["by_op"].values()) == 7
    assert st["by_op"] == {"AccumulateGrad": 2, "Sum": 2, "Add": 1, "Exp": 1, "Mul": 1}
    assert st["live"] == 7 and st["freed"] == 0 and st["hooked"] == 1
    b = st["bytes"]
    assert b["total"] == sum(v for k, v in b.items() if k != "total")
    assert b["values_v1"] == 8 * 7
    assert b["values_arena"] == 8 * (3 + 3)      # s and s * s
    assert b["values_refs"] == 100 * 8           # exp's output, read by its VJP
    assert b["metadata"] > 0
    # y's op records that saved values (exp, mul); its sums and add saved
    # nothing and stay differentiable, as PyTorch's nodes do
    assert after["records"] == 8 and after["freed"] == 2
    assert after["bytes"]["adjoints"] >= 8 * 100


def test_repr_is_a_table_and_as_dict_is_plain():
    def f():
        x = leaf([1.0, 2.0])
        y = tg.sin(x) * 2.0
        return tg.tape_stats(), y
    st, _ = in_fresh_thread(f)
    text = repr(st)
    assert text.splitlines()[0] == "tape statistics (this thread)"
    assert "records" in text and "Sin" in text and "MulScalar" in text
    assert "values_v1" in text
    d = st.as_dict()
    assert type(d) is dict and type(d["by_op"]) is dict and d == dict(st)


@pytest.mark.compaction_trigger
def test_live_counts_what_tensors_reach():
    def f():
        x = leaf([1.0, 2.0])
        keep = tg.sin(x)
        tg.cos(x) * 3.0                          # dropped at once
        return tg.tape_stats(), keep
    st, _ = in_fresh_thread(f)
    assert st["records"] == 4 and st["live"] == 2   # the leaf and sin


def test_anomaly_records_are_counted():
    def f():
        x = leaf([1.0])
        with tg.detect_anomaly():
            y = tg.exp(x)
        return tg.tape_stats(), y
    st, _ = in_fresh_thread(f)
    assert st["traced"] == 2
