"""FP16C (hpcsolve/core/fp16c.py): the NumPy codec against an independent nearest-value rounding, its CUDA C twin
compiled for the host, the LBM storage policy and the accuracy it buys over fp16s."""

import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcsolve.core import fp16c
from hpcsolve.core.precision import FP16C, get_precision

CODES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _table():
    """Values of the non-negative finite codes 0 .. 0x7FFE (increasing), and the value 0x7FFF would have."""
    v = fp16c.decode(CODES[:0x7FFF]).astype(np.float64)
    return v, (1 + 2047 / 2048) * 1.0


def _nearest(x):
    """Independent reference: the nearest finite code by value (ties to the even code); NaN past the top."""
    vals, beyond = _table()
    ext = np.append(vals, beyond)
    a = np.abs(x.astype(np.float64))
    i = np.clip(np.searchsorted(ext, a), 1, len(ext) - 1)
    lo, hi = ext[i - 1], ext[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & ((i & 1) == 0))
    code = np.where(pick_hi, i, i - 1)
    code = np.where(a > beyond, 0x7FFF, code)
    code = np.where(np.isnan(x), 0x7FFF, code)
    sign = np.where(np.signbit(x), 0x8000, 0)
    return (code | sign).astype(np.uint16)


def test_every_code_round_trips_and_values_increase():
    v = fp16c.decode(CODES)
    nan = np.isnan(v)
    assert np.count_nonzero(nan) == 2 and set(CODES[nan].tolist()) == {0x7FFF, 0xFFFF}
    assert np.array_equal(fp16c.encode(v[~nan]), CODES[~nan])
    pos = v[:0x7FFF].astype(np.float64)
    assert np.all(np.diff(pos) > 0)
    assert pos[0] == 0.0 and pos[1] == 2.0 ** -25 and pos[0x800] == 2.0 ** -14 and pos[-1] == fp16c.MAX_FINITE
    # one more mantissa bit than IEEE float16: the relative spacing of normal values is 2^-11
    assert np.max(np.diff(pos[0x800:]) / pos[0x800:-1]) == 2.0 ** -11


def test_encode_rounds_to_the_nearest_code():
    rng = np.random.default_rng(7)
    x = np.concatenate([
        rng.uniform(-2.1, 2.1, 200_000), rng.standard_normal(100_000) * 1e-3,
        np.exp(rng.uniform(np.log(1e-12), np.log(2.5), 200_000)) * rng.choice([-1, 1], 200_000),
        # exact midpoints between neighbouring codes (ties go to the even code)
        (fp16c.decode(CODES[1:0x7FFE]).astype(np.float64) + fp16c.decode(CODES[2:0x7FFF]).astype(np.float64)) / 2,
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.999267578125, 1.99927, 1e-38, -1e-45],
    ]).astype(np.float32)
    assert np.array_equal(fp16c.encode(x), _nearest(x))


@settings(max_examples=500, deadline=None)
@given(st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_encode_matches_reference_on_any_float32(x):
    a = np.array([x], dtype=np.float32)
    assert fp16c.encode(a)[0] == _nearest(a)[0]


def test_cuda_source_gives_the_same_bits_compiled_for_the_host(tmp_path):
    """The CUDA C functions (fp16c.CUDA_SOURCE), compiled as host C with the device intrinsics spelled as
    memcpy, against the NumPy codec: every code decoded, and 1.2 million float32 values encoded."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no host C compiler")
    prelude = r"""
#include <stdio.h>
#include <string.h>
#include <stdbool.h>
#include <math.h>
#define __device__
#define __forceinline__ static inline
static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
"""
    main = r"""
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb"); FILE* g = fopen(argv[2], "wb"); unsigned int n; fread(&n, 4, 1, f);
  for (unsigned int c = 0; c < 65536u; c++) { float v = fp16c_decode((unsigned short)c); fwrite(&v, 4, 1, g); }
  for (unsigned int k = 0; k < n; k++) { float x; fread(&x, 4, 1, f); unsigned short c = fp16c_encode(x); fwrite(&c, 2, 1, g); }
  for (unsigned int k = 0; k < n; k++) {      /* stochastic: the seed of (x, k), direction k % 9 */
    float x; fread(&x, 4, 1, f); unsigned int s = fp16c_seed(x, k); fwrite(&s, 4, 1, g);
    const unsigned int a[9] = STREAM_A, c9[9] = STREAM_C;
    unsigned short c = fp16c_encode_sr(x, a[k % 9] * s + c9[k % 9]); fwrite(&c, 2, 1, g);
  }
  fclose(f); fclose(g); return 0;
}
"""
    src = tmp_path / "fp16c.c"
    stream = "".join(f"#define STREAM_{n} {{{', '.join(f'{v[j]}u' for v in fp16c.STREAM)}}}\n"
                     for j, n in enumerate("AC"))
    src.write_text(prelude + stream + fp16c.CUDA_SOURCE + main)
    exe = tmp_path / "fp16c"
    subprocess.run([cc, "-O2", "-o", str(exe), str(src), "-lm"], check=True, capture_output=True)
    x = _float32_samples()
    inp, out = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(np.uint32(x.size).tobytes() + x.tobytes() + x.tobytes())
    subprocess.run([str(exe), str(inp), str(out)], check=True)
    data = out.read_bytes()
    n0 = 65536 * 4 + x.size * 2
    _check_codec(np.frombuffer(data[:65536 * 4], dtype=np.float32), x, np.frombuffer(data[65536 * 4:n0], dtype=np.uint16))
    rec = np.frombuffer(data[n0:], dtype=np.dtype([("s", "<u4"), ("c", "<u2")]))
    seeds, codes = _stochastic_reference(x)
    assert np.array_equal(rec["s"], seeds) and np.array_equal(rec["c"], codes)


def _host_ir_functions():
    """The LLVM IR the Numba-CUDA kernels get (fp16c._decode_ir / _encode_ir / _pack_sr_ir / _seed_ir), compiled
    for this CPU by llvmlite's JIT: ctypes functions of 32-bit values."""
    import ctypes

    from llvmlite import binding as llvm
    from llvmlite import ir

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module(name="fp16c_host")
    i32, f32 = ir.IntType(32), ir.FloatType()

    # every value crosses as its 32 bits (a float through ctypes would pass through a double: NaN payloads change)
    def flt(b, u):
        return b.bitcast(u, f32)

    bodies = {
        "dec_lo": (1, lambda b, u: b.bitcast(fp16c._decode_ir(b, u, 16), i32)),
        "dec_hi": (1, lambda b, u: b.bitcast(fp16c._decode_ir(b, u, 32), i32)),
        "enc": (1, lambda b, v: fp16c._encode_ir(b, flt(b, v))),
        "enc_sr": (2, lambda b, v, r: fp16c._encode_ir(b, flt(b, v), r)),
        "pack_sr": (4, lambda b, x, y, rx, ry: fp16c._pack_sr_ir(b, flt(b, x), flt(b, y), rx, ry)),
        "seed": (2, lambda b, h, c: fp16c._seed_ir(b, flt(b, h), c)),
    }
    for name, (n, body) in bodies.items():
        fn = ir.Function(module, ir.FunctionType(i32, [i32] * n), name=name)
        builder = ir.IRBuilder(fn.append_basic_block())
        builder.ret(body(builder, *fn.args))
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    engine = llvm.create_mcjit_compiler(parsed, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    u32 = ctypes.c_uint32
    funcs = {name: ctypes.CFUNCTYPE(u32, *[u32] * n)(engine.get_function_address(name)) for name, (n, _) in bodies.items()}
    return engine, funcs


def test_numba_ir_gives_the_same_bits_compiled_for_the_host():
    """The Numba-CUDA codec (LLVM IR intrinsics) JIT-compiled for the host against the NumPy codec: every code
    decoded from either half of a word, round to nearest and stochastic encodes (the pair kernel's packed form too)
    and seeds of 36,000 float32 values (ranges, random bit patterns, NaN and infinities, ties)."""
    engine, f = _host_ir_functions()
    dec = fp16c.decode(CODES).view(np.uint32)
    for name, word in (("dec_lo", CODES.astype(np.uint32) | 0xABCD0000), ("dec_hi", (CODES.astype(np.uint32) << 16) | 0x1234)):
        assert np.array_equal(np.array([f[name](int(w)) for w in word], np.uint32), dec)
    x = _float32_samples()[::36]
    bits = [int(b) for b in x.view(np.uint32)]
    assert np.array_equal(np.array([f["enc"](b) & 0xFFFF for b in bits], np.uint16), fp16c.encode(x))
    seeds, codes = _stochastic_reference(x)
    k = np.arange(x.size)
    assert np.array_equal(np.array([f["seed"](b, int(j)) for j, b in zip(k, bits)], np.uint32), seeds)
    words = [(a * int(s) + c) & 0xFFFFFFFF for (a, c), s in zip((fp16c.STREAM[j % 9] for j in k), seeds)]
    assert np.array_equal(np.array([f["enc_sr"](b, w) & 0xFFFF for b, w in zip(bits, words)], np.uint16), codes)
    packed = np.array([f["pack_sr"](b, c, w, z) for b, c, w, z in zip(bits, bits[::-1], words, words[::-1])], np.uint32)
    assert np.array_equal(packed & 0xFFFF, codes) and np.array_equal(packed >> 16, codes[::-1])


def _stochastic_reference(x):
    """NumPy seeds of (x_k, k) and stochastic codes of x_k in direction k % 9 (what the device tests compute)."""
    k = np.arange(x.size)
    seeds = fp16c.seed(x, k)
    codes = np.empty(x.size, np.uint16)
    for i in range(9):
        col = np.zeros((i + 1, int(np.count_nonzero(k % 9 == i))), np.float32)
        col[i] = x[k % 9 == i]
        codes[k % 9 == i] = fp16c.encode_stochastic(col, seeds[k % 9 == i])[i]
    return seeds, codes


def test_stochastic_rounding_is_unbiased_between_the_two_neighbouring_codes():
    """encode_stochastic: every code is the one below or above |x| (subnormal results too, on the 2^-25 grid), the
    rounding up happens with probability (|x| - below) / step: the mean of 40,000 seeds is x within 4 standard
    errors; NaN and overflow give the NaN code; the seed depends on the value and the cell."""
    rng = np.random.default_rng(11)
    xs = np.concatenate([rng.uniform(-1.9, 1.9, 30), np.exp(rng.uniform(np.log(7e-5), 0, 30)),
                         -np.exp(rng.uniform(np.log(1e-7), np.log(6e-5), 12))]).astype(np.float32)
    n = 40_000
    for x in xs:
        seeds = fp16c.seed(rng.standard_normal(n).astype(np.float32), np.arange(n))
        c = fp16c.encode_stochastic(np.full((9, n), x, np.float32), seeds)
        v = fp16c.decode(c).astype(np.float64)
        vals = np.unique(v)
        step = max(2.0 ** (np.floor(np.log2(abs(float(x)))) - 11), fp16c.SUBNORMAL_STEP)
        assert vals.size <= 2 and (vals.size == 1 or vals[1] - vals[0] == step)
        p = (abs(float(x)) - np.floor(abs(float(x)) / step) * step) / step
        assert abs(v.mean() - float(x)) <= 4 * step * np.sqrt(max(p * (1 - p), 1e-12) / v.size) + 1e-12 * step
    bad = np.array([[np.nan, np.inf, 3.0, -5.0]], np.float32)
    assert np.all(fp16c.is_nan(fp16c.encode_stochastic(bad, np.arange(4, dtype=np.uint32))))
    assert fp16c.seed(np.float32(0.1), 5) != fp16c.seed(np.float32(0.1), 6) != fp16c.seed(np.float32(0.2), 5)


@pytest.mark.slow
def test_fp16c_stochastic_rounding_keeps_a_slow_cavity_near_fp64():
    """Slow (~85-250 s NumPy: three 16,000-step runs): ``python -m pytest -m slow``; the fast counterpart is
    test_fp16c_stochastic_rounding_keeps_couette_flow_on_its_analytic_profile.

    Cavity at Re 250, 64 cells, lattice velocity 0.1 (tau 0.577), 16,000 steps, NumPy: with round to nearest the
    fp16c field's distance to fp64 jumped from 4e-4 to 7.5e-3 after 10,000 steps (the rounding's systematic part
    adding up); with the stochastic rounding of the step's stores it stays at ~4e-4."""
    from hpcsolve.core.cases import load_case
    from hpcsolve.lbm import setup as lbm_setup
    from hpcsolve.lbm.steppers.kernels_numpy import make_stepper
    from hpcsolve.core.precision import FP64, Precision

    case = load_case("cases/lid_driven_cavity_re1000.toml", ["lattice.resolution=64", "steady.enabled=false",
                                                              "physics.reynolds=250.0"])

    class Nearest(Precision):          # fp16c with the step's stores rounded to nearest, for the comparison
        def encode_step(self, post, h0, cells):
            return self.encode(post)

    nearest = Nearest(**{f: getattr(FP16C, f) for f in FP16C.__dataclass_fields__})
    u = {}
    for name, pol in (("fp64", FP64), ("fp16c", FP16C), ("nearest", nearest)):
        _, geo, setup = lbm_setup.build_setup(case, pol)
        st = make_stepper(setup)
        st.step(16_000)
        u[name] = np.stack(st.macroscopic()[1:])[:, geo.fluid]
    dist = {k: float(np.linalg.norm(u[k] - u["fp64"]) / np.linalg.norm(u["fp64"])) for k in ("fp16c", "nearest")}
    print(dist)
    assert dist["fp16c"] < 1e-3 and dist["nearest"] > 5 * dist["fp16c"]


def test_fp16c_stochastic_rounding_keeps_couette_flow_on_its_analytic_profile():
    """The fast counterpart of the slow cavity test above, on a flow with an analytic steady state: plane Couette flow
    between a resting wall and a wall moving at 0.05 (16 fluid rows, periodic along x, TRT tau 0.8), 3,000 steps
    (about 4 diffusion times H^2 / nu), NumPy. The LBM reproduces the linear profile exactly (fp64: 7e-6 off after 3,000
    steps, 3e-14 at steady state). fp16c with the step's stores rounded to nearest freezes once the per-step changes
    fall below half a code step: its error stops at 1.14e-2 from step ~2,000 on (the same systematic rounding that
    takes the 64-cell cavity from 4e-4 to 7.5e-3); with stochastic rounding it stays at rounding-noise level, seen
    3.9e-4 .. 1.2e-3 between 2,000 and 10,000 steps. Bounds: stochastic < 2.5e-3 (twice the largest seen), nearest
    > 5e-3 and > 4x stochastic."""
    from hpcsolve.lbm.flags import VELOCITY, WALL
    from hpcsolve.lbm.steppers.stepper import LBMSetup, get_stepper
    from hpcsolve.core.precision import Precision

    class Nearest(Precision):          # fp16c with the step's stores rounded to nearest, for the comparison
        def encode_step(self, post, h0, cells):
            return self.encode(post)

    nearest = Nearest(**{f: getattr(FP16C, f) for f in FP16C.__dataclass_fields__})
    n, lid = 16, 0.05
    flags = np.zeros((n + 2, 4), np.uint8)
    flags[0], flags[-1] = WALL, VELOCITY
    bv = np.zeros((2, n + 2, 4))
    bv[0, -1] = lid
    exact = lid * (np.arange(n) + 0.5) / n                       # walls half-way between the rows
    err = {}
    for name, pol in (("fp16c", FP16C), ("nearest", nearest)):
        st = get_stepper("numpy", LBMSetup(flags, 0.8, collision="trt", policy=pol, boundary_velocity=bv))
        st.step(3000)
        ux = st.macroscopic()[1][1:-1]
        err[name] = float(np.linalg.norm(ux - exact[:, None]) / np.linalg.norm(np.broadcast_to(exact[:, None], ux.shape)))
    print(err)
    assert err["fp16c"] < 2.5e-3
    assert err["nearest"] > 5e-3 and err["nearest"] > 4 * err["fp16c"]


def _float32_samples() -> np.ndarray:
    """1.2 million float32 values over and past the range, random bit patterns (every kind, NaN payloads),
    the decoded codes, and the midpoints between neighbouring codes (ties)."""
    rng = np.random.default_rng(3)
    values = fp16c.decode(np.arange(0x7FFF, dtype=np.uint16)).astype(np.float64)   # 0 .. largest finite
    ties = ((values[:-1] + values[1:]) / 2).astype(np.float32)                       # exact in float32
    return np.concatenate([rng.uniform(-2.1, 2.1, 400_000).astype(np.float32),
                           (np.exp(rng.uniform(np.log(1e-12), np.log(2.5), 400_000))
                            * rng.choice([-1, 1], 400_000)).astype(np.float32),
                           rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                           fp16c.decode(CODES), ties, -ties])


def _check_codec(dec: np.ndarray, x: np.ndarray, enc: np.ndarray) -> None:
    """``dec`` (every code decoded) and ``enc`` (``x`` encoded) against the NumPy codec, bit for bit."""
    ref = fp16c.decode(CODES)
    assert np.array_equal(dec.view(np.uint32)[~np.isnan(ref)], ref.view(np.uint32)[~np.isnan(ref)])
    assert np.all(np.isnan(dec[np.isnan(ref)]))
    assert np.array_equal(enc, fp16c.encode(x))


def test_policy_stores_fp16c_codes_and_detects_blow_up():
    p = get_precision("fp16c", "lbm")
    assert p is FP16C and p.storage == np.uint16 and p.storage_bytes == 2
    h = np.array([0.0123, -0.31, 4e-7], dtype=np.float32)
    g = p.encode(h)
    assert g.dtype == np.uint16 and np.array_equal(g, fp16c.encode(h))
    assert np.allclose(p.decode(g), h, rtol=2.0 ** -12, atol=2.0 ** -26)
    assert p.all_finite(g) and not p.all_finite(p.encode(np.array([0.1, np.nan], np.float32)))
    assert not p.all_finite(p.encode(np.array([3.0], np.float32)))      # past the range: NaN, a blow-up
    with pytest.raises(Exception, match="fp16c"):
        get_precision("fp16c", "fem")


def test_fp16c_cavity_is_closer_to_fp64_than_fp16s():
    """The lid-driven cavity (Re 100, 32 cells, 3,000 steps, NumPy): the velocity field's relative L2
    distance to fp64. Seen: fp32 ~5e-6, fp16s ~4e-3 and fp16c ~2e-3 at 64 cells and 15,000 steps."""
    from hpcsolve.run import run_case

    over = ["lattice.resolution=32", "steady.enabled=false", "time.steps=3000"]
    res = {p: run_case("cases/lid_driven_cavity.toml", "numpy", p, progress=False, plots=False, overrides=over)
           for p in ("fp64", "fp16s", "fp16c")}
    u0 = res["fp64"].fields["velocity"]
    err = {p: float(np.linalg.norm(r.fields["velocity"] - u0) / np.linalg.norm(u0)) for p, r in res.items()}
    print(err)
    assert err["fp16c"] < 0.7 * err["fp16s"] and err["fp16c"] < 5e-3


def test_codec_keeps_shapes_and_takes_strided_input():
    """0-d in, 0-d out (the simulator's device functions encode scalars); a strided view encodes as its copy."""
    assert fp16c.encode(np.float32(0.5)).shape == () and fp16c.encode(np.float32(0.5))[()] == 0x7000
    assert fp16c.decode(np.uint16(0x7000)).shape == () and fp16c.decode(np.uint16(0x7000))[()] == 0.5
    x = np.linspace(-1.5, 1.5, 40, dtype=np.float32).reshape(4, 10)
    assert np.array_equal(fp16c.encode(x[:, ::3]), fp16c.encode(np.ascontiguousarray(x[:, ::3])))
    assert fp16c.encode(x).shape == (4, 10)


def test_codec_in_chunks_gives_the_same_bits(monkeypatch):
    """Arrays larger than fp16c.CHUNK convert a chunk at a time (bounded temporaries): the same codes and values."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((9, 37, 23)) * 0.05).astype(np.float32)
    whole_c, whole_v = fp16c.encode(x), fp16c.decode(fp16c.encode(x))
    monkeypatch.setattr(fp16c, "CHUNK", 1000)
    c = fp16c.encode(x)
    assert c.shape == x.shape and np.array_equal(c, whole_c)
    v = fp16c.decode(c)
    assert v.shape == x.shape and np.array_equal(v.view(np.uint32), whole_v.view(np.uint32))
    assert np.array_equal(fp16c.encode(x[:, ::2]), whole_c[:, ::2])


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cupy", "numba-cuda"])
def test_device_codec_gives_the_same_bits(backend):
    """The codec the kernels use, run on the GPU: CUDA C (``CUDA_SOURCE`` in a CuPy RawKernel) and the Numba
    functions (32-bit LLVM IR), against the NumPy codec on every code and the samples above."""
    x = _float32_samples()
    if backend == "cupy":
        cp = pytest.importorskip("cupy")
        stream = "".join(f"__device__ const unsigned int STREAM_{n}[9] = {{{', '.join(f'{v[j]}u' for v in fp16c.STREAM)}}};\n"
                         for j, n in enumerate("AC"))
        kernel = cp.RawKernel(fp16c.CUDA_SOURCE + stream + r"""
extern "C" __global__ void codec(const unsigned short* c, float* dec, const float* x, unsigned short* enc,
                                 unsigned int* seeds, unsigned short* enc_sr, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 65536) dec[i] = fp16c_decode(c[i]);
  if (i < n) {
    enc[i] = fp16c_encode(x[i]);
    const unsigned int s = fp16c_seed(x[i], (unsigned int)i);
    seeds[i] = s;
    enc_sr[i] = fp16c_encode_sr(x[i], STREAM_A[i % 9] * s + STREAM_C[i % 9]);
  }
}""", "codec", options=("--std=c++17",))
        c, xd = cp.asarray(CODES), cp.asarray(x)
        dec, enc = cp.empty(65536, cp.float32), cp.empty(x.size, cp.uint16)
        seeds, enc_sr = cp.empty(x.size, cp.uint32), cp.empty(x.size, cp.uint16)
        kernel(((x.size + 255) // 256,), (256,), (c, dec, xd, enc, seeds, enc_sr, np.int32(x.size)))
        _check_codec(dec.get(), x, enc.get())
        ref_seeds, ref_codes = _stochastic_reference(x)
        assert np.array_equal(seeds.get(), ref_seeds) and np.array_equal(enc_sr.get(), ref_codes)
        return
    cuda = pytest.importorskip("numba.cuda")
    decode, encode = fp16c.numba_functions()

    @cuda.jit
    def codec(c, dec, xs, enc):
        i = cuda.grid(1)
        if i < c.size:
            dec[i] = decode(c[i])
        if i < xs.size:
            enc[i] = encode(xs[i])

    dec, enc = cuda.device_array(65536, np.float32), cuda.device_array(x.size, np.uint16)
    codec[(x.size + 255) // 256, 256](cuda.to_device(CODES), dec, cuda.to_device(x), enc)
    _check_codec(dec.copy_to_host(), x, enc.copy_to_host())
    seed, encoders, packers = fp16c.numba_stochastic_functions()
    src = ["def stochastic(xs, seeds, out, packed):", "    i = cuda.grid(1)", "    if i >= xs.size:", "        return",
           "    s = seed(xs[i], i)", "    seeds[i] = s", "    k = i % 9"]
    for j in range(9):
        src += [f"    if k == {j}:", f"        out[i] = enc{j}(xs[i], s)",
                f"        packed[i] = pack{j}(xs[i], xs[i - 1 if i > 0 else 0], s, seed(xs[i - 1 if i > 0 else 0], i - 1))"]
    ns = {"cuda": cuda, "seed": seed, **{f"enc{j}": e for j, e in enumerate(encoders)},
          **{f"pack{j}": pk for j, pk in enumerate(packers)}}
    exec("\n".join(src), ns)
    kern = cuda.jit(ns["stochastic"])
    seeds, out = cuda.device_array(x.size, np.uint32), cuda.device_array(x.size, np.uint16)
    packed = cuda.device_array(x.size, np.int32)
    kern[(x.size + 255) // 256, 256](cuda.to_device(x), seeds, out, packed)
    ref_seeds, ref_codes = _stochastic_reference(x)
    assert np.array_equal(seeds.copy_to_host(), ref_seeds) and np.array_equal(out.copy_to_host(), ref_codes)
    # the packed word: the code of x_i (low half) and of x_(i-1) with the seed of (x_(i-1), i - 1), direction i % 9
    w = packed.copy_to_host().view(np.uint32)
    prev = np.concatenate([x[:1], x[:-1]])
    k = np.arange(x.size)
    prev_seed = fp16c.seed(prev, k - 1)
    hi = np.empty(x.size, np.uint16)
    for j in range(9):
        m = k % 9 == j
        col = np.zeros((j + 1, int(m.sum())), np.float32)
        col[j] = prev[m]
        hi[m] = fp16c.encode_stochastic(col, prev_seed[m])[j]
    assert np.array_equal((w & 0xFFFF).astype(np.uint16), ref_codes) and np.array_equal((w >> 16).astype(np.uint16), hi)


def test_step_stores_of_a_scaled_fp16c_policy_apply_the_scale():
    """encode_step of an fp16c policy with a population scale (the scaling study's variants) stores h * S, as
    encode does: decoded back, the value within one code step."""
    import dataclasses

    p2 = dataclasses.replace(FP16C, population_scale=2.0)
    x = (np.random.default_rng(8).standard_normal((9, 500)) * 0.01).astype(np.float32)
    g = p2.encode_step(x, x[0].copy(), np.arange(500))
    assert np.all(np.abs(p2.decode(g) - x) <= 2.0 ** -11 * np.abs(x) + 2.0 ** -26)
    assert not np.array_equal(g, FP16C.encode_step(x, x[0].copy(), np.arange(500)))
