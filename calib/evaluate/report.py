"""The accuracy-drop report: report.json, report.md and a self-contained report.html with plots.

The first screen says which cache to ship and how sure (calib/evaluate/decision.py), how to deploy it and what to
try next; then every algorithm's figures with 95 % intervals, the paired comparisons, engines, the worst layers
and charts. report.json is strict JSON: non-finite numbers are written as null."""
from __future__ import annotations

import base64
import io
import json
import math

import numpy as np

from calib.evaluate import report_doc as doc
from calib.evaluate.confidence import label
from calib.evaluate.decision import decide
from calib.evaluate.deploy_choice import fp16_blocks
from calib.deploy.measured import worth_blocks
from calib.evaluate.placement_rows import placement_blocks
from calib.runners.tensorrt.inspect import counts_text
from calib.evaluate.deploy_doc import deploy_commands
from calib.evaluate.verdict import PROXY, is_proxy, verdict
from calib.io.files import atomic_write_text

MAX_LAYERS_PLOTTED = 80
_TASK_ORDER = {"classification": ("agreement_top1", "top1", "agreement_top5"),
               "embedding": ("mean_cosine", "min_cosine"),
               "text": ("exact_match_vs_fp32", "cer_vs_fp32"),
               "detection": ("map50_95_vs_fp32", "map50_vs_fp32", "recall_vs_fp32", "map50_95_labels", "map50_labels",
                             "recall_labels")}


def task_metrics(entry: dict, task: str) -> dict:
    """Flat {metric: value} of one configuration's task result."""
    t = entry.get("task") or {}
    out = {}
    if task == "classification":
        out["agreement_top1"] = t.get("agreement_top1")
        out["agreement_top5"] = t.get("agreement_top5")
        if "test_top1" in t:
            out["top1"] = t["test_top1"]  # its drop against FP32's top-1 is the row's "drop" (with an interval)
    elif task == "detection":
        out["map50_vs_fp32"] = t.get("vs_fp32", {}).get("map50")
        out["map50_95_vs_fp32"] = t.get("vs_fp32", {}).get("map50_95")
        if t.get("vs_fp32", {}).get("recall") is not None:
            out["recall_vs_fp32"] = t["vs_fp32"]["recall"]
        if "vs_labels" in t:
            out["map50_95_labels"] = t["vs_labels"]["map50_95"]
            out["map50_labels"] = t["vs_labels"]["map50"]
            if t["vs_labels"].get("recall") is not None:
                out["recall_labels"] = t["vs_labels"]["recall"]
    elif task == "embedding":
        out["mean_cosine"] = t.get("mean_cosine")
        out["min_cosine"] = t.get("min_cosine")
    elif task == "text":
        out["exact_match_vs_fp32"] = t.get("exact_match_vs_fp32")
        out["cer_vs_fp32"] = t.get("cer_vs_fp32")
    out.update(entry.get("scores") or {})  # the user's metric (calib.evaluate.scores.user)
    for name, m in entry.get("outputs", {}).items():
        out[f"{name}_sqnr_db"] = m["sqnr_db"]
        out[f"{name}_cosine"] = m["cosine"]
    return out


def primary_score(entry: dict, task: str) -> float:
    m = task_metrics(entry, task)
    if task == "classification":
        return m.get("agreement_top1") or 0.0
    if task == "detection":
        return m.get("map50_95_vs_fp32") or 0.0
    if task == "embedding":
        return m.get("mean_cosine") or 0.0
    if task == "text":
        return m.get("exact_match_vs_fp32") or 0.0
    sq = [v for k, v in m.items() if k.endswith("_sqnr_db") and v is not None]
    return min(sq) if sq else -math.inf


def drop(entry: dict, task: str, fp32_task: dict | None) -> float | None:
    """The accuracy drop on the task's main metric: against labels where the data has them, else against FP32."""
    t = entry.get("task") or {}
    if task == "classification":
        if "test_top1" in t:
            return t["ref_top1"] - t["test_top1"]
        return None if t.get("agreement_top1") is None else 1.0 - t["agreement_top1"]
    if task == "detection":
        if "vs_labels" in t and fp32_task and "vs_labels" in fp32_task:
            return fp32_task["vs_labels"]["map50_95"] - t["vs_labels"]["map50_95"]
        v = t.get("vs_fp32", {}).get("map50_95")
        return None if v is None else 1.0 - v
    if task == "embedding":
        return None if t.get("mean_cosine") is None else 1.0 - t["mean_cosine"]
    if task == "text":
        return None if t.get("exact_match_vs_fp32") is None else 1.0 - t["exact_match_vs_fp32"]
    return None


def _columns(rows: dict, task: str, primary: str | None) -> list[str]:
    """Metric columns: the primary metric, the task's others, the outputs'; columns equal on every row last."""
    keys = list(dict.fromkeys(k for r in rows.values() for k in r if k != "drop"))
    fixed = [k for k in _TASK_ORDER.get(task, ()) if k in keys]
    rest = [k for k in keys if k not in fixed]
    rest = sorted(rest, key=lambda k: (not k.endswith("sqnr_db"), k))
    ordered = list(dict.fromkeys(([primary] if primary in keys else []) + fixed + rest))
    if len(rows) > 1:
        const = [k for k in ordered if len({repr(r.get(k)) for r in rows.values()}) == 1]
        ordered = [k for k in ordered if k not in const] + const
    return ordered


def summary(evaluation: dict, candidates=None) -> dict:
    """Rows per configuration, their intervals, the paired comparisons and the decision among `candidates`
    (default: every configuration); `best` is the configuration to ship."""
    task = evaluation["task"]
    rows, intervals = {}, {}
    for n, e in evaluation["configs"].items():
        rows[n] = task_metrics(e, task)
        d = drop(e, task, evaluation.get("fp32_task"))
        if d is not None:
            rows[n]["drop"] = d
        if e.get("intervals"):
            intervals[n] = e["intervals"]
            for k, f in e["intervals"].items():
                rows[n].setdefault(k, f["value"])
    pool = [n for n in (candidates or evaluation["configs"]) if n in evaluation["configs"]]
    decision = decide(evaluation, pool, lambda e: primary_score(e, task))
    worst = {}
    for n, e in evaluation["configs"].items():
        layers = [l for l in e["layers"] if l["op_type"] != "Input"]
        worst[n] = sorted(layers, key=lambda l: l["sqnr_db"])[:10]
    metric = evaluation.get("primary_metric")
    return {"task": task, "metric": metric, "metrics": _columns(rows, task, metric),
            "labels": {k: label(k) for r in rows.values() for k in r}, "rows": rows, "intervals": intervals,
            "fp32": evaluation.get("fp32_intervals") or {}, "n": evaluation.get("samples"),
            "fp32_boxes": evaluation.get("fp32_boxes"), "conf_threshold": evaluation.get("conf_threshold"),
            "paired": evaluation.get("paired") or [],
            "bootstrap": evaluation.get("bootstrap"), "decision": decision, "best": decision["ship"],
            "worst_layers": worst}


def ship_line(report: dict) -> str:
    """The decision in one line, for the terminal: the cache to ship and how sure."""
    d = report["summary"]["decision"]
    ship = d["ship"]
    best = (f"outputs closer to FP32 than {d.get('runner_up')}'s beyond noise (output SQNR, a proxy for the task)"
            if is_proxy(d.get("metric")) else f"better than {d.get('runner_up')} beyond noise")
    how = {"best": best, "only_one": "the only one evaluated",
           "tie": "no significant difference from " + ", ".join(d.get("tied") or [d.get("runner_up") or "-"]),
           "too_small": "provisionally, the evaluation is too small to decide",
           "no_intervals": "the highest point estimate"}.get(d["status"], d["status"])
    return f"ship {doc.shown_path(report.get('caches', {}).get(ship, ship + '.cache'))} ({ship}): {how}"


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def layer_plot(evaluation: dict, focus: str | None = None) -> str | None:
    """The per-layer chart (layer_figure) as base64 PNG; None when no configuration has per-layer figures."""
    fig = layer_figure(evaluation, focus)
    return None if fig is None else _png(fig)


def layer_figure(evaluation: dict, focus: str | None = None):
    """Per-layer SQNR of each configuration, one row per tensor named on the axis (topological order); with
    many tensors, the MAX_LAYERS_PLOTTED lowest of `focus`. None when no configuration has per-layer figures."""
    configs = {n: e["layers"] for n, e in evaluation["configs"].items() if e.get("layers")}

    def drawn(layer) -> bool:
        return layer["sqnr_db"] is not None and math.isfinite(layer["sqnr_db"])

    if not any(drawn(l) for layers in configs.values() for l in layers):
        return None  # no per-layer figures, or none finite (all identical to FP32, or NaN): no empty chart
    ref = configs.get(focus) or next(iter(configs.values()))
    names = [l["tensor"] for l in ref]
    if len(names) > MAX_LAYERS_PLOTTED:
        keep = {l["tensor"] for l in sorted(ref, key=lambda l: l["sqnr_db"])[:MAX_LAYERS_PLOTTED]}
        names = [t for t in names if t in keep]
    pos = {t: i for i, t in enumerate(names)}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.2 * len(names) + 1.2)))
    for name, layers in configs.items():
        pts = [(l["sqnr_db"], pos[l["tensor"]]) for l in layers if l["tensor"] in pos and drawn(l)]
        if pts:
            x, y = zip(*pts)
            ax.plot(x, y, marker="o", ms=3, lw=1.0, label=name)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([t if len(t) <= 48 else "..." + t[-45:] for t in names], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("SQNR vs FP32 (dB); tensors identical to FP32 (infinite SQNR) not drawn", fontsize=10)
    ax.tick_params(axis="x", labelsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="best")
    more = f", the {len(names)} lowest of {len(ref)} for {focus}" if len(names) < len(ref) else ""
    ax.set_title(f"Per-tensor SQNR of the INT8 simulation (topological order{more})", fontsize=11)
    return fig


def histogram_plots(stats, amax: dict, tensors: list[str]) -> list[tuple[str, str]]:
    out = []
    colors = {"minmax": "tab:red", "entropy": "tab:blue", "percentile": "tab:green", "mse": "tab:purple",
              "entropy-stable": "tab:cyan"}
    for t in tensors:
        if t not in getattr(stats, "hists", {}):
            continue
        plt = _pyplot()
        h = stats.hists[t]
        top = max([h.absmax] + [a[t] for a in amax.values() if t in a]) or 1.0
        counts = h.resample(256, top)
        fig, ax = plt.subplots(figsize=(5.6, 2.9))
        ax.bar(np.linspace(0, top, 256, endpoint=False), np.maximum(counts, 0.5), width=top / 256, color="0.6",
               log=True, align="edge")
        for name, a in amax.items():
            if t in a:
                ax.axvline(a[t], color=colors.get(name, "k"), lw=1.3, label=f"{name} {a[t]:.3g}")
        ax.set_title(t if len(t) < 50 else "..." + t[-47:], fontsize=10)
        ax.set_xlabel("|x|", fontsize=9)
        ax.set_ylabel("count", fontsize=9)
        ax.tick_params(labelsize=9)
        ax.legend(fontsize=9)
        out.append((t, _png(fig)))
    return out


def engine_rows(report: dict) -> list[dict]:
    """One row per TensorRT engine: precision mix, latency, speed-up against the FP16 and FP32 engines."""
    section = report.get("tensorrt") or {}
    engines = section.get("engines", {})
    ref = {k: (engines.get(f"trt-{k}") or {}).get("latency", {}).get("median_ms") for k in ("fp32", "fp16")}
    gref = {k: (engines.get(f"trt-{k}") or {}).get("graph_latency", {}).get("median_ms") for k in ("fp32", "fp16")}
    rows = []
    for name, e in engines.items():
        lat = e.get("latency") or {}
        ms, gms = lat.get("median_ms"), (e.get("graph_latency") or {}).get("median_ms")
        row = {"engine": name, "layers": counts_text(e.get("layer_summary", {})),
               "median_ms": ms, "build_s": e.get("build_seconds"), "min_ms": lat.get("min_ms"),
               "max_ms": lat.get("max_ms"), "runs": lat.get("runs"), "graph_ms": gms}
        for k, v in ref.items():
            row[f"x_vs_{k}"] = (v / ms) if (v and ms) else None
            row[f"x_vs_{k}_graph"] = (gref[k] / gms) if (gref[k] and gms) else None
        rows.append(row)
    return rows


def _engine_blocks(report: dict) -> list[tuple]:
    rows = engine_rows(report)
    if not rows:
        return []
    t = report["tensorrt"]
    return [("h2", f"TensorRT engines ({t.get('tensorrt')}, {t.get('gpu')}, batch {t.get('batch')})"),
            ("p", "Accuracy of each engine is in the table above (rows `trt-...`, measured on the GPU); rows "
                  "`<algorithm>@engine` are the CPU simulation told which layers the engine kept in float."),
            ("table", ["engine", "layers per precision", "median latency (ms; min to max, runs)",
                       "speed-up vs FP16 engine", "speed-up vs FP32 engine", "as CUDA graphs: ms", "vs FP16",
                       "build time (s)"],
             [[r["engine"], r["layers"], _latency_cell(r), doc.num(r["x_vs_fp16"]), doc.num(r["x_vs_fp32"]),
               doc.num(r["graph_ms"]), doc.num(r["x_vs_fp16_graph"]), doc.num(r["build_s"])] for r in rows]),
            ("p", "Latency: runs enqueued one by one (the host launches every kernel) and, beside it, each run "
                  "launched as one CUDA graph (the GPU's time alone, as `trtexec --useCudaGraph`). On a small "
                  "engine at a small batch the launches can be most of the first figure; whether INT8 pays is "
                  "judged on the CUDA-graph figures where both engines have one.")] + _pays_blocks(rows, t.get("batch"))


def _pays_blocks(rows: list[dict], batch) -> list[tuple]:
    """Whether each INT8 engine pays against the FP16 engine at this batch, said plainly (calib.deploy.worth)."""
    from calib.deploy.worth import TOLERANCE, verdict

    said = []
    for r in rows:
        x = r.get("x_vs_fp16_graph") or r.get("x_vs_fp16")
        if x is None or r["engine"] in ("trt-fp16", "trt-fp32"):
            continue
        v = verdict(x)
        at = f"at batch {batch}" + (" as CUDA graphs" if r.get("x_vs_fp16_graph") else "")
        if v == "pays":
            said.append(f"`{r['engine']}` pays: {x:.2f}x the FP16 engine's speed {at}.")
        elif v == "same":
            said.append(f"`{r['engine']}` does not pay {at}: {x:.2f}x the FP16 engine "
                        f"(within {TOLERANCE:.0%}); build FP16, or time a larger batch with `calib bench "
                        "INT8.engine --against FP16.engine --shape ...`.")
        else:
            said.append(f"`{r['engine']}` does not pay {at}: slower than the FP16 engine ({x:.2f}x).")
    return [("list", said)] if said else []


def _latency_cell(r: dict) -> str:
    if r.get("median_ms") is None:
        return "-"
    spread = (f" ({r['min_ms']:.4f} to {r['max_ms']:.4f}, n={r['runs']} runs)"
              if r.get("min_ms") is not None and r.get("max_ms") is not None and r.get("runs") else "")
    return f"{r['median_ms']:.4f}{spread}"


def _simulation_text(report: dict) -> str:
    pm = report.get("precision_model")
    if not pm:
        return "INT8 simulated on the CPU with Q/DQ (ONNX Runtime)."
    floats = pm.get("float_nodes") or []
    return (f"INT8 simulated on the CPU (ONNX Runtime) as the deployed build runs it, which ranks the algorithms: "
            f"{pm['text']}" + (f" ({len(floats)} nodes in float)." if floats else "."))


def _worst_table(layers: list[dict]) -> tuple:
    ns = {(l.get("n"), l.get("groups")) for l in layers}
    n = ""
    if len(ns) == 1:
        count, groups = ns.pop()
        n = f", n={count}" + (f" from {groups} photos" if groups else "") if count else ""
    cell = lambda l, k: doc.fig_cell({"value": l[k], "ci95": l.get(f"{k.split('_')[0]}_ci95")}, k)  # noqa: E731
    return ("table", ["tensor", "op", f"SQNR vs FP32 (dB, 95 % CI{n})", f"cosine vs FP32 (95 % CI{n})"],
            [[f"`{l['tensor']}`", l["op_type"], cell(l, "sqnr_db"), cell(l, "cosine")] for l in layers])


def _verdict_blocks(report: dict) -> list[tuple]:
    """The absolute verdict (calib.evaluate.verdict), its next step, and the proxy caveat without a task metric."""
    v = report.get("verdict") or verdict(report)
    out = [("p", v["text"])]
    if v.get("next"):
        out.append(("p", f"Next step: {v['next']}"))
    if v.get("proxy") or report["summary"]["task"] == "outputs":
        out.append(("warn", PROXY))
    return out


def blocks(report: dict, layer_png: str | None = None, hist_pngs=()) -> list[tuple]:
    s = report["summary"]
    ship = s["best"]
    calib_n = (report.get("calibration") or {}).get("samples")
    unit = "images" if s["task"] == "detection" else "samples"
    out = [("h1", f"calib report: {report['recipe']}")]
    out += doc.ship_sentence(s, report.get("caches", {}), bool(report.get("recipe_file")))
    out += _verdict_blocks(report)
    out += [doc.results_table(s)]
    meta = (f"Model `{report['model']}` (sha256 {report['model_sha256'][:12]})"
            + (f", calibrated on {calib_n} samples" if isinstance(calib_n, int) else "")
            + f", evaluated on {report['evaluation']['samples']} {unit} ({s['task']}"
            + (f", {s['fp32_boxes']} FP32 boxes" if s.get("fp32_boxes") is not None else "")
            + "). " + (f"Decoded by {report['decoder']}. " if report.get("decoder") else "")
            + _simulation_text(report) + " " + doc.method_text(s))
    out += [("p", meta.strip())] + [("warn", n) for n in report.get("input_notes") or []]
    out += [("h2", "Deploy"), ("code", deploy_commands(report, ship)),
            ("h2", "What to try next"), ("list", doc.next_steps(report, s))]
    out += doc.paired_table(s)
    fp32 = doc.fp32_blocks(report, s)
    if fp32:
        out += [("h2", "FP32 reference")] + fp32
    sk = report.get("skipped_images") or {}
    skipped = [p for v in sk.values() for p in v]
    if skipped:
        out += [("h2", "Skipped images"), ("list", [f"`{p}` (unreadable)" for p in skipped])]
    out += _engine_blocks(report)
    out += worth_blocks(report)
    out += placement_blocks(report)
    out += fp16_blocks(report)
    if s["worst_layers"].get(ship):
        out += [("h2", f"Worst layers ({ship})"), _worst_table(s["worst_layers"][ship])]
    for name, e in report["evaluation"]["configs"].items():
        if e.get("perturbed") and s["worst_layers"].get(name):
            out += [("h2", f"Worst layers ({name}: a perturbed engine)"),
                    ("p", "Every tensor of this engine is marked as an output so that TensorRT's own per-layer values "
                          "can be compared with FP32; marking stops fusions and changes precisions, so its numbers are "
                          "not those of the deployed engine (its output row above shows by how much)."),
                    _worst_table(s["worst_layers"][name])]
    if layer_png:
        out += [("h2", "Per-layer SQNR"), ("img", "per-layer SQNR chart", layer_png)]
    if hist_pngs:
        out += [("h2", "Histograms of the worst tensors, with each algorithm's threshold"), ("imgs", list(hist_pngs))]
    if report.get("files"):
        out += [("h2", "Files"), ("list", [f"`{f}`" for f in report["files"]])]
    return out


def markdown(report: dict) -> str:
    return doc.to_markdown(blocks(report))


def html_report(report: dict, layer_png: str | None, hist_pngs: list[tuple[str, str]]) -> str:
    return doc.to_html(blocks(report, layer_png, hist_pngs), f"calib report: {report['recipe']}")


def strict(obj):
    """A copy of `obj` that strict JSON accepts: non-finite floats become None, numpy scalars Python numbers."""
    if isinstance(obj, dict):
        return {str(k): strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def report_json(report: dict) -> str:
    body = dict(strict(report), json_note="null stands for a missing or non-finite value (an infinite SQNR: "
                                            "the tensor is identical to FP32)")
    return json.dumps(body, indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_reports(out_dir, report: dict, stats, amax: dict, n_hist: int = 6) -> list[str]:
    s = report["summary"]
    report.setdefault("verdict", verdict(report))
    worst = [l["tensor"] for l in s["worst_layers"].get(s["best"], [])][:n_hist]
    atomic_write_text(f"{out_dir}/report.json", report_json(report))
    atomic_write_text(f"{out_dir}/report.md", markdown(report))
    ev = {"configs": report["evaluation"]["configs"]}
    atomic_write_text(f"{out_dir}/report.html", html_report(report, layer_plot(ev, s["best"]),
                                                            histogram_plots(stats, amax, worst)))
    return ["report.json", "report.md", "report.html"]
