"""The accuracy-drop report: report.json, report.md and a self-contained report.html with plots."""
from __future__ import annotations

import base64
import html
import io
import math

import numpy as np

from calib.io import atomic_write_json, atomic_write_text


def _fmt(v, digits=2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:.{digits}f}"
    return str(v)


def task_metrics(entry: dict, task: str) -> dict:
    """Flat {metric: value} of one configuration's task result."""
    t = entry.get("task") or {}
    out = {}
    if task == "classification":
        out["agreement_top1"] = t.get("agreement_top1")
        out["agreement_top5"] = t.get("agreement_top5")
        if "test_top1" in t:
            out["top1"] = t["test_top1"]
            out["top1_drop"] = t["ref_top1"] - t["test_top1"]
    elif task == "detection":
        out["map50_vs_fp32"] = t.get("vs_fp32", {}).get("map50")
        out["map50_95_vs_fp32"] = t.get("vs_fp32", {}).get("map50_95")
        if "vs_labels" in t:
            out["map50_95_labels"] = t["vs_labels"]["map50_95"]
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
    return None


def summary(evaluation: dict, candidates=None) -> dict:
    """Rows per configuration; `best` is chosen among `candidates` (default: every configuration)."""
    task = evaluation["task"]
    rows = {}
    for n, e in evaluation["configs"].items():
        rows[n] = task_metrics(e, task)
        d = drop(e, task, evaluation.get("fp32_task"))
        if d is not None:
            rows[n]["drop"] = d
    pool = [n for n in (candidates or evaluation["configs"]) if n in evaluation["configs"]]
    best = max(pool, key=lambda n: primary_score(evaluation["configs"][n], task))
    worst = {}
    for n, e in evaluation["configs"].items():
        layers = [l for l in e["layers"] if l["op_type"] != "Input"]
        worst[n] = sorted(layers, key=lambda l: l["sqnr_db"])[:10]
    return {"task": task, "rows": rows, "best": best, "worst_layers": worst}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def layer_plot(evaluation: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 3.6))
    for name, e in evaluation["configs"].items():
        if not e["layers"]:
            continue  # an engine: outputs only
        y = [min(l["sqnr_db"], 80.0) for l in e["layers"]]
        ax.plot(range(len(y)), y, label=name, lw=1.2)
    ax.set_xlabel("tensor (topological order)")
    ax.set_ylabel("SQNR vs FP32 (dB)")
    ax.grid(alpha=0.3)
    ax.legend(ncol=4, fontsize=8)
    ax.set_title("Per-layer SQNR of the INT8 simulation")
    return _png(fig)


def histogram_plots(stats, amax: dict, tensors: list[str]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    colors = {"minmax": "tab:red", "entropy": "tab:blue", "percentile": "tab:green", "mse": "tab:purple"}
    for t in tensors:
        if t not in stats.hists:
            continue
        h = stats.hists[t]
        top = max([h.absmax] + [a[t] for a in amax.values() if t in a]) or 1.0
        counts = h.resample(256, top)
        fig, ax = plt.subplots(figsize=(5.2, 2.6))
        ax.bar(np.linspace(0, top, 256, endpoint=False), np.maximum(counts, 0.5), width=top / 256, color="0.6",
               log=True, align="edge")
        for name, a in amax.items():
            if t in a:
                ax.axvline(a[t], color=colors.get(name, "k"), lw=1.3, label=f"{name} {a[t]:.3g}")
        ax.set_title(t if len(t) < 60 else "..." + t[-57:], fontsize=8)
        ax.set_xlabel("|x|", fontsize=8)
        ax.legend(fontsize=7)
        out.append((t, _png(fig)))
    return out


def engine_rows(report: dict) -> list[dict]:
    """One row per TensorRT engine: precision mix, latency, speed-up against the FP16 and FP32 engines."""
    trt = report.get("tensorrt") or {}
    engines = trt.get("engines", {})
    ref = {k: (engines.get(f"trt-{k}") or {}).get("latency", {}).get("median_ms") for k in ("fp32", "fp16")}
    rows = []
    for name, e in engines.items():
        ms = (e.get("latency") or {}).get("median_ms")
        row = {"engine": name, "layers": ", ".join(f"{k} {v}" for k, v in sorted(e.get("layer_summary", {}).items())),
               "median_ms": ms, "build_s": e.get("build_seconds")}
        for k, v in ref.items():
            row[f"x_vs_{k}"] = (v / ms) if (v and ms) else None
        rows.append(row)
    return rows


def _engine_md(report: dict) -> list[str]:
    rows = engine_rows(report)
    if not rows:
        return []
    t = report["tensorrt"]
    lines = ["", f"## TensorRT engines ({t.get('tensorrt')}, {t.get('gpu')}, batch {t.get('batch')})", "",
             "Accuracy of each engine is in the table above (rows `trt-...`, measured on the GPU); "
             "rows `<algorithm>@engine` are the CPU simulation told which layers the engine kept in float.", "",
             "| engine | layers per precision | median ms | x vs FP16 | x vs FP32 | build s |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['engine']} | {r['layers']} | {_fmt(r['median_ms'], 4)} | {_fmt(r['x_vs_fp16'])} | "
                     f"{_fmt(r['x_vs_fp32'])} | {_fmt(r['build_s'], 1)} |")
    return lines


def _worst_md(layers: list[dict]) -> list[str]:
    return ["| tensor | op | SQNR dB | cosine |", "|---|---|---|---|"] + [
        f"| `{l['tensor']}` | {l['op_type']} | {_fmt(l['sqnr_db'])} | {_fmt(l['cosine'], 4)} |" for l in layers]


def markdown(report: dict) -> str:
    s = report["summary"]
    metrics = sorted({k for r in s["rows"].values() for k in r})
    lines = [f"# calib report: {report['recipe']}", "",
             f"Model `{report['model']}` (sha256 {report['model_sha256'][:12]}), calibrated on "
             f"{report['calibration']['samples']} samples, evaluated on {report['evaluation']['samples']} "
             f"({s['task']}). INT8 is simulated on the CPU with Q/DQ (ONNX Runtime).", "",
             "| algorithm | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for name, row in s["rows"].items():
        mark = " (best)" if name == s["best"] else ""
        lines.append(f"| {name}{mark} | " + " | ".join(_fmt(row.get(m), 3) for m in metrics) + " |")
    sk = report.get("skipped_images") or {}
    n_sk = sum(len(v) for v in sk.values())
    if n_sk:
        lines += ["", f"Skipped {n_sk} unreadable images: " + ", ".join(f"`{p}`" for v in sk.values() for p in v)]
    if report.get("fp32_task"):
        lines += ["", f"FP32 reference against itself: `{report['fp32_task']}`"]
    lines += _engine_md(report)
    lines += ["", f"## Worst layers ({s['best']})", ""] + _worst_md(s["worst_layers"].get(s["best"], []))
    for name, e in report["evaluation"]["configs"].items():
        if e.get("perturbed") and s["worst_layers"].get(name):
            lines += ["", f"## Worst layers ({name}: a perturbed engine)", "",
                      "Every tensor of this engine is marked as an output so that TensorRT's own per-layer values can "
                      "be compared with FP32; marking stops fusions and changes precisions, so its numbers are not "
                      "those of the deployed engine (its output row above shows by how much).", ""]
            lines += _worst_md(s["worst_layers"][name])
    lines += ["", "## Files", ""] + [f"- `{f}`" for f in report["files"]]
    return "\n".join(lines) + "\n"


def html_report(report: dict, layer_png: str, hist_pngs: list[tuple[str, str]]) -> str:
    md = markdown(report)
    s = report["summary"]
    metrics = sorted({k for r in s["rows"].values() for k in r})
    head = "".join(f"<th>{html.escape(m)}</th>" for m in metrics)
    body = ""
    for name, row in s["rows"].items():
        cls = ' class="best"' if name == s["best"] else ""
        body += f"<tr{cls}><td>{html.escape(name)}</td>" + "".join(
            f"<td>{_fmt(row.get(m), 3)}</td>" for m in metrics) + "</tr>"
    worst = "".join(f"<tr><td><code>{html.escape(l['tensor'])}</code></td><td>{l['op_type']}</td>"
                    f"<td>{_fmt(l['sqnr_db'])}</td><td>{_fmt(l['cosine'], 4)}</td></tr>"
                    for l in s["worst_layers"].get(s["best"], []))
    erows = engine_rows(report)
    engines = ""
    if erows:
        t = report["tensorrt"]
        engines = (f"<h2>TensorRT engines ({html.escape(str(t.get('tensorrt')))}, {html.escape(str(t.get('gpu')))}, "
                   f"batch {t.get('batch')})</h2><table><tr><th>engine</th><th>layers per precision</th>"
                   "<th>median ms</th><th>x vs FP16</th><th>x vs FP32</th><th>build s</th></tr>" + "".join(
                       f"<tr><td>{html.escape(r['engine'])}</td><td>{html.escape(r['layers'])}</td>"
                       f"<td>{_fmt(r['median_ms'], 4)}</td><td>{_fmt(r['x_vs_fp16'])}</td><td>{_fmt(r['x_vs_fp32'])}"
                       f"</td><td>{_fmt(r['build_s'], 1)}</td></tr>" for r in erows) + "</table>")
    hists = "".join(f'<figure><img src="data:image/png;base64,{p}"><figcaption>{html.escape(t)}</figcaption>'
                    f"</figure>" for t, p in hist_pngs)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>calib report: {html.escape(report['recipe'])}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}tr.best{{background:#e8f5e9}}figure{{display:inline-block;margin:4px}}
figcaption{{font-size:11px;max-width:470px;overflow:hidden}}code{{font-size:12px}}</style></head><body>
<h1>calib report: {html.escape(report['recipe'])}</h1>
<p>Model <code>{html.escape(report['model'])}</code>; calibration samples {report['calibration']['samples']},
evaluation samples {report['evaluation']['samples']}, task <b>{s['task']}</b>. INT8 simulated on the CPU with
Q/DQ (ONNX Runtime). Best algorithm: <b>{html.escape(s['best'])}</b>.</p>
<h2>Accuracy against FP32, per algorithm</h2><table><tr><th>algorithm</th>{head}</tr>{body}</table>
{engines}
<h2>Per-layer SQNR</h2><img src="data:image/png;base64,{layer_png}">
<h2>Worst layers ({html.escape(s['best'])})</h2><table><tr><th>tensor</th><th>op</th><th>SQNR dB</th><th>cosine</th></tr>{worst}</table>
<h2>Histograms of the worst tensors, with each algorithm's threshold</h2>{hists}
<h2>Report as Markdown</h2><pre>{html.escape(md)}</pre></body></html>
"""


def write_reports(out_dir, report: dict, stats, amax: dict, n_hist: int = 6) -> list[str]:
    s = report["summary"]
    worst = [l["tensor"] for l in s["worst_layers"].get(s["best"], [])][:n_hist]
    atomic_write_json(f"{out_dir}/report.json", report)
    atomic_write_text(f"{out_dir}/report.md", markdown(report))
    ev = {"configs": report["evaluation"]["configs"]}
    atomic_write_text(f"{out_dir}/report.html", html_report(report, layer_plot(ev), histogram_plots(stats, amax,
                                                                                                    worst)))
    return ["report.json", "report.md", "report.html"]
