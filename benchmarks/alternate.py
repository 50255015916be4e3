"""A table's engines timed in turns, group by group, plainly and as CUDA graph launches, with their ratios.

    python benchmarks/alternate.py DIR [--engines implicit,calib-qdq,fp16] [--batch 4] [--repeats 60] [--iters 50]

DIR is a qdq_table.py output folder (its engines are in DIR/work/<name>.engine). Timing each engine after the other
lets a drift of the GPU's clocks or of the host's load fall on one engine: here group k of every engine runs before
group k+1 of any (calib.deploy.engine_file.alternate_engines). The plain figure includes the host's cost of launching
every kernel, which on a small engine at a small batch can be most of it; the CUDA-graph figure is the GPU's time
(trtexec --useCudaGraph). Writes DIR/alternate.json (--name) and prints a markdown table; the first engine is the baseline.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--engines", default="implicit,calib-qdq,fp16")
    ap.add_argument("--batch", type=int, default=0, help="default: the table's batch")
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--name", default="alternate", help="DIR/NAME.json and DIR/NAME.md")
    args = ap.parse_args()
    from calib.deploy.engine_file import alternate_engines
    from calib.runners.tensorrt.device import Cuda
    from calib.runners.tensorrt.runner import TrtRunner

    d = Path(args.dir)
    table = json.loads((d / "table.json").read_text())
    asked = args.engines.split(",")
    names = [n for n in asked if (d / "work" / f"{n}.engine").is_file()]
    missing = [n for n in asked if n not in names]
    if missing:  # said, so that a table timed without one of its engines does not pass for a whole one
        print(f"{d}: not timed, no engine in {d / 'work'}: {', '.join(missing)}", file=sys.stderr)
    if len(names) < 2:
        raise SystemExit(f"{d}: fewer than two of {args.engines} were built: nothing to alternate")
    paths = [d / "work" / f"{n}.engine" for n in names]
    cuda = Cuda()
    probe = TrtRunner(paths[0], None, cuda)
    b = args.batch or table["batch"]
    point = {n: (b, *probe.ranges[n][1][1:]) for n in probe.inputs}
    probe.close()
    out = {"gpu": cuda.name(), "tensorrt": table.get("tensorrt"), "model": table.get("model"), "batch": b,
           "opt_level": table.get("opt_level"), "repeats": args.repeats, "iters": args.iters,
           "date": time.strftime("%Y-%m-%d"), "modes": {}}
    for mode, graph in (("plain", False), ("cuda_graph", True)):
        rows = alternate_engines(paths, point, iters=args.iters, repeats=args.repeats, cuda=cuda, cuda_graph=graph)
        out["modes"][mode] = {n: r for n, r in zip(names, rows)}
        (d / f"{args.name}.json").write_text(json.dumps(out, indent=2))
    base = names[0]
    lines = [f"{out['model']} batch {b}, level {out['opt_level']}, {out['gpu']}, TensorRT {out['tensorrt']}: "
             f"{args.repeats} groups of {args.iters} runs per engine, in turns", "",
             f"| engine | median ms | min-max | x {base} | CUDA graph median ms | min-max | x {base} (graph) | "
             "launched per run |", "|---|---|---|---|---|---|---|---|"]
    for n in names:
        p, g = out["modes"]["plain"][n], out["modes"]["cuda_graph"][n]
        bp, bg = out["modes"]["plain"][base]["median_ms"], out["modes"]["cuda_graph"][base]["median_ms"]
        nodes = ", ".join(f"{k} {v}" for k, v in (g.get("graph_nodes") or {}).items()) or "?"
        lines.append(f"| {n} | {p['median_ms']:.4f} | {p['min_ms']:.4f}-{p['max_ms']:.4f} | {bp / p['median_ms']:.2f} | "
                     f"{g['median_ms']:.4f} | {g['min_ms']:.4f}-{g['max_ms']:.4f} | {bg / g['median_ms']:.2f} | {nodes} |")
    (d / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
