import json

import numpy as np
import pytest

from hpcsolve.core.checkpoint import (Checkpoint, check_compatible, latest_checkpoint, list_checkpoints,
                                 write_checkpoint)
from hpcsolve.core.errors import CaseError

CASE = json.dumps({"name": "c", "physics": {"reynolds": 100}})


def _ckpt(step, value):
    g = np.full((9, 3, 4), value, dtype=np.float16)
    return Checkpoint(step=step, arrays={"populations": g}, state={"series": {"t": [0.0, 1.5]}},
                      meta={"backend": "numpy", "precision": "fp16s", "case_json": CASE})


def test_checkpoints_round_trip_bitwise_and_keep_the_last_two(tmp_path):
    for step, v in ((100, 0.1), (200, 0.2), (300, 0.3)):
        write_checkpoint(tmp_path, _ckpt(step, v))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint_0000000200.h5", "checkpoint_0000000300.h5"]
    c = latest_checkpoint(tmp_path)
    assert c.step == 300 and c.arrays["populations"].dtype == np.float16
    np.testing.assert_array_equal(c.arrays["populations"], _ckpt(300, 0.3).arrays["populations"])
    assert c.state == {"series": {"t": [0.0, 1.5]}}


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous(tmp_path):
    write_checkpoint(tmp_path, _ckpt(100, 0.1))
    newest = write_checkpoint(tmp_path, _ckpt(200, 0.2))
    newest.write_bytes(b"not hdf5")
    assert latest_checkpoint(tmp_path).step == 100


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CaseError, match="--resume: no checkpoint found"):
        latest_checkpoint(tmp_path)


def test_resume_with_other_settings_is_refused_unless_forced(tmp_path):
    write_checkpoint(tmp_path, _ckpt(100, 0.1))
    c = latest_checkpoint(tmp_path)
    assert check_compatible(c, case_json=CASE, backend="numpy", precision="fp16s") == []
    other = json.dumps({"name": "c", "physics": {"reynolds": 400}})
    with pytest.raises(CaseError, match=r"precision 'fp16s' in the checkpoint, 'fp32' now; case 'c' \(case hash [0-9a-f]{16}\) in "
                       r"the checkpoint, case 'c' \(case hash [0-9a-f]{16}\) now: the case differs in physics.reynolds"):
        check_compatible(c, case_json=other, backend="numpy", precision="fp32")
    assert len(check_compatible(c, case_json=other, backend="numpy", precision="fp32", force=True)) == 2


def test_resume_across_streaming_choices_is_allowed(tmp_path):
    """lattice.streaming changes speed and memory, not results (the populations are stored in the even layout):
    a checkpoint written with 'two-buffer' (the default before 'auto') resumes under 'auto' or 'in-place'; any
    other difference still counts."""
    case = lambda streaming, re=100: json.dumps({"name": "c", "lattice": {"resolution": 16, "streaming": streaming},
                                                 "physics": {"reynolds": re}})
    ck = _ckpt(100, 0.1)
    ck.meta["case_json"] = case("two-buffer")
    write_checkpoint(tmp_path, ck)
    c = latest_checkpoint(tmp_path)
    for streaming in ("auto", "in-place", "two-buffer"):
        assert check_compatible(c, case_json=case(streaming), backend="numpy", precision="fp16s") == []
    with pytest.raises(CaseError, match=r"case differs in physics\.reynolds") as err:
        check_compatible(c, case_json=case("auto", re=400), backend="numpy", precision="fp16s")
    assert "lattice.streaming" not in str(err.value)
