#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_ddp.py - the DDP communication hook (gradwire.torch) end to end.

    test_ddp.py CODEC        e.g. none, fp16, int8, topk:ratio=0.01, powersgd:rank=4
    test_ddp.py checkpoint [CODEC]    (default topk:ratio=0.01)

Two processes (torch.multiprocessing, gloo over lo, gradwire over lo) train
gradwire.synthetic's MLP for 300 steps. For a codec: once with the process
group's own allreduce (the uncompressed reference), once with the hook and
GRADWIRE_CODEC=CODEC. Checks: replicas bit-identical; final loss within 5 %
of the reference and far below the first loss; the negotiated codec is the
one asked for; the wire ratio after warm-up is what the codec promises
(none: the hook is bit-identical to the process group with two ranks).
checkpoint: a codec with error feedback (top-k; PowerSGD, whose factors take
streams of their own), warm-up 20, checkpointed at step 150
(model, optimizer, hook state), torn down, rebuilt and restored, ends
bit-identical to an uninterrupted run; restoring without the residuals does
not (so the test sees them).

Exit 77 (skip) when torch is missing or the library lacks the codec.
GW_LIB names libgradwire.so.
"""
import os
import sys
import time

from checks import SKIP, check, exit_code, local_providers, require_torch  # noqa: E402 (beside this file)

require_torch()

from gradwire import lib as gwlib  # noqa: E402
import synthetic  # noqa: E402 (tests/python, beside this file)

ENV = {"GRADWIRE_IFACE": "lo", "GLOO_SOCKET_IFNAME": "lo",
       "GRADWIRE_LOG": "warn",
       # Both weight matrices compressed (w1: 8K floats, 16 KiB per ring chunk).
       "GRADWIRE_MIN_COMPRESS_BYTES": "4K"}
# Warm-up steps (exact) and the least wire ratio after them, per codec.
WARMUP = {"topk": 20, "powersgd": 20}
MIN_RATIO = {"none": 0.95, "fp16": 1.8, "bf16": 1.8, "int8": 3.0,
             "topk": 10.0, "powersgd": 5.0}


def train(cfgs, labels):
    """Run cfgs in one pair of processes; check replicas; their results."""
    t = time.monotonic()
    runs = synthetic.run(cfgs, timeout=100 * len(cfgs))
    print(f"     {len(cfgs)} runs in {time.monotonic() - t:.1f} s", flush=True)
    for r, label in zip(runs, labels):
        print(f"     {label}: final loss {r[0]['final_loss']:.5f}, "
              f"{r[0]['seconds']:.1f} s training", flush=True)
        check(all(x["identical"] for x in r) and len({x["digest"] for x in r}) == 1,
              f"{label}: replicas are bit-identical")
    return runs


def skip_unless(spec):
    name = spec.split(":")[0]
    lib = gwlib.load()
    if not lib.codec_available(name):
        print(f"SKIP: libgradwire.so ({lib.path}) has no codec '{name}' "
              "(gw_codec_find returned NULL)")
        sys.exit(SKIP)
    return name


def test_codec(spec):
    name = skip_unless(spec)
    warmup = WARMUP.get(name, 0)
    env = dict(ENV, GRADWIRE_CODEC=spec)
    ref, got = train([{"hook": False, "env": env},
                      {"env": env, "warmup": warmup}],
                     ["process group (reference)", f"gradwire {spec}, warm-up {warmup}"])
    base, final = ref[0]["final_loss"], got[0]["final_loss"]
    rel = (final - base) / base
    print(f"     final loss {final:.5f} vs {base:.5f} uncompressed ({rel:+.2%})")
    check(abs(rel) <= 0.05, f"{spec}: final loss within 5% of the uncompressed run")
    check(final < 0.2 * got[0]["losses"][0], f"{spec}: the model learnt "
          f"(first loss {got[0]['losses'][0]:.3f})")
    for r in got:
        neg = set(r["codecs"].values())
        check(len(neg) == 1 and neg.pop().split(":")[0] == name,
              f"rank {r['rank']} negotiated {r['codecs']}")
        check(r["lossy_links"] == (name != "none"),
              f"rank {r['rank']}: buckets go whole exactly only when no link "
              f"compresses (lossy_links {r['lossy_links']})")
        # The ranks share this host: GRADWIRE_PROVIDER_LOCAL carries them.
        want, wants = local_providers(os.environ.get("GRADWIRE_PROVIDER", "shm"))
        used = set(r["providers"].values())
        check(len(used) == 1 and used <= wants,
              f"rank {r['rank']}'s connections run over {want}: {r['providers']}")
    exact = sum(got[0]["exact_bytes"][warmup:])
    wire = sum(got[0]["wire_bytes"][warmup:])
    ratio = exact / wire if wire else 0.0
    print(f"     after warm-up, rank 0 sent {wire} wire bytes where an exact "
          f"ring sends {exact} (ratio {ratio:.2f}; tensor bytes in frames "
          f"{sum(got[0]['raw_bytes'][warmup:])})")
    check(len(got[0]["wire_bytes"]) == 300, "statistics for every step")
    check(ratio >= MIN_RATIO.get(name, 1.0), f"{spec}: wire ratio {ratio:.2f} >= "
          f"{MIN_RATIO.get(name, 1.0)}")
    if name == "none":
        check(got[0]["digest"] == ref[0]["digest"],
              "none: bit-identical to the process group's allreduce (2 ranks)")


def test_checkpoint(spec):
    skip_unless(spec)
    env = dict(ENV, GRADWIRE_CODEC=spec)
    plain, ckpt, drop = train(
        [{"env": env, "warmup": 20}, {"env": env, "warmup": 20, "save_at": 150},
         {"env": env, "warmup": 20, "save_at": 150, "drop_residuals": True}],
        [f"{spec}, uninterrupted", f"{spec}, restored at step 150",
         f"{spec}, restored without residuals"])
    check(ckpt[0]["digest"] == plain[0]["digest"],
          "restored run ends bit-identical to the uninterrupted one")
    check(drop[0]["digest"] != plain[0]["digest"],
          "without the residuals it does not (the checkpoint carries them)")
    check(ckpt[0]["losses"] == plain[0]["losses"], "same loss at every step")


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 2
    t = time.monotonic()
    if sys.argv[1] == "checkpoint":
        test_checkpoint(sys.argv[2] if len(sys.argv) == 3 else "topk:ratio=0.01")
    else:
        test_codec(sys.argv[1])
    return exit_code(f", {time.monotonic() - t:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
