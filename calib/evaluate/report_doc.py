"""The report's content as blocks (headings, paragraphs, tables, commands), rendered as Markdown and as HTML.

Both renderings come from the same blocks, so report.md and report.html say the same thing. The first screen
answers: which cache to ship and how sure (intervals, the paired comparison behind the choice), the commands that
deploy it, and what to try next.
"""
from __future__ import annotations

import html
import math
import re
import shlex
from pathlib import Path

from calib.evaluate.confidence import label
from calib.evaluate.decision import oriented


def num(v, key: str = "") -> str:
    """A value for a table: None as '-', non-finite as 'inf'/'-inf'/'nan', digits by the metric's kind."""
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if key.endswith("_db") or key == "sqnr_db":
        s = f"{v:.1f}"
    elif key.endswith("cosine"):
        s = f"{v:.4f}"
    else:
        s = f"{v:.3f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s  # -0.000 (a tiny negative) is shown as 0.000


def fig_cell(f: dict | None, key: str) -> str:
    if not f:
        return "-"
    ci = f.get("ci95")
    return num(f.get("value"), key) + (f" ({num(ci[0], key)} to {num(ci[1], key)})" if ci else "")


def column_label(key: str, figs: dict, unit: str) -> str:
    ns = {(f["n"], f.get("groups")) for f in figs.values() if f}
    n = ""
    if len(ns) == 1:
        count, groups = ns.pop()
        n = f", n={count} {unit}" + (f" from {groups} photos" if groups else "")
    return f"{label(key)} (95 % CI{n})"


def _signed(v, key) -> str:
    s = num(v, key)
    return s if s.startswith("-") or s in ("nan", "inf") or (s[:1].isdigit() and float(s) == 0) else "+" + s


def _cache_name(caches: dict, name: str) -> str:
    return f"`{Path(caches.get(name, name + '.cache')).name}`"


def ship_sentence(s: dict, caches: dict, from_recipe: bool = False) -> list[tuple]:
    d = s["decision"]
    ship = d["ship"]
    cache = _cache_name(caches, ship)
    reason = d["reason"]
    unit = "images" if s["task"] == "detection" else "samples"
    more = ("the recipe's evaluation_data" if from_recipe else
            f"a --data with more {unit} or a larger --limit, apart from the calibration {unit}")
    if d["status"] in ("best", "only_one"):
        return [("p", f"**Ship {cache}**: {reason}.")]
    if d["status"] == "tie":
        others = ", ".join(_cache_name(caches, n) for n in d.get("tied", []))
        return [("p", f"**Ship {cache}** ({ship}, the highest {label(d['metric'])}), but there is "
                      f"{reason}. {others} would do as well on this evaluation.")]
    if d["status"] == "too_small":
        return [("p", f"**Ship {cache}** ({ship}) only provisionally; {reason}."),
                ("warn", f"Warning: too small an evaluation to choose between algorithms. Evaluate on more {unit} "
                 f"({more}) before relying on the choice.")]
    return [("p", f"**Ship {cache}** ({ship}): {reason}.")]


def shown_path(path) -> str:
    """A path as a user would type it: relative to the working folder when inside it, else with ~ for home."""
    import os

    p = Path(os.path.abspath(str(path)))  # normalises recipes/../runs without resolving links
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        pass
    home = Path.home()
    try:
        return str(Path("~") / p.relative_to(home))
    except ValueError:
        return str(p)


def next_steps(report: dict, s: dict) -> list[str]:
    recipe = report.get("recipe_file")
    items = []
    if recipe:
        items.append(f"`calib sensitivity {shlex.quote(recipe)}`: ranks the layers by their INT8 damage and finds the "
                     "fewest to keep in FP16 for an accuracy budget (recipe section sensitivity).")
        if not report.get("equalization"):
            items.append(f"`calib run {shlex.quote(recipe)} --set calibration.equalize=true`: cross-layer "
                         "equalization before calibration, for models whose per-channel ranges differ widely.")
    else:
        example = {"detection": "`recipes/yolo.yaml` in calib's repository is one for a detector on a folder of "
                                "photos", "embedding": "`recipes/minilm.yaml` in calib's repository is one for a "
                                "sentence encoder on lines of text"}.get(
            s["task"], "`recipes/mobilenet_v2.yaml` in calib's repository is one for a classifier on a folder of photos")
        items.append("`calib sensitivity RECIPE`: ranks the layers by their INT8 damage and finds the fewest to keep "
                     "in FP16 for an accuracy budget. A recipe is a YAML file naming the model, the calibration and "
                     f"evaluation data and the preprocessing ({example}).")
        if s["worst_layers"].get(s["best"]):
            items.append("`calib evaluate ... --exclude LAYER`: the same comparison with a layer kept in float "
                         "(FP16 in the engine), e.g. a Conv of the worst layers below.")
        items.append("`calib calibrate ... --equalize`: cross-layer equalization before calibration, for models "
                     "whose per-channel ranges differ widely; evaluate the `<model>.equalized.onnx` it writes with "
                     "its caches.")
    if s["decision"]["status"] in ("tie", "too_small"):
        unit = "images" if s["task"] == "detection" else "samples"
        items.append(f"More evaluation {unit} narrow the intervals: the comparison is decided by the paired "
                     f"difference, whose interval shrinks with the square root of the number of {unit}.")
    return items


def results_table(s: dict) -> tuple:
    unit = "images" if s["task"] == "detection" else "samples"
    keys = s["metrics"]
    with_ci = {k for k in keys if any(k in f for f in s["intervals"].values())}  # e.g. min_cosine has none
    head = ["algorithm"] + [column_label(k, {n: s["intervals"].get(n, {}).get(k) for n in s["intervals"]}, unit)
                            if k in with_ci else label(k) for k in keys]
    rows = []
    for name in s["rows"]:
        mark = " (ship)" if name == s["best"] else ""
        figs = s["intervals"].get(name, {})
        rows.append([name + mark] + [fig_cell(figs.get(k), k) if figs and k in with_ci else
                                     num(s["rows"][name].get(k), k) for k in keys])
    return ("table", head, rows)


def paired_table(s: dict) -> list[tuple]:
    d = s["decision"]
    if not d.get("comparison"):
        return []
    key = d["metric"]
    rows = []
    for n in s["rows"]:
        c = oriented(s["paired"], d["ship"], n) if n != d["ship"] else None
        if c is None:
            continue
        ci = c.get("ci95")
        floor = 1.0 / (s.get("bootstrap") or {}).get("resamples", 1000)
        p = f"< {floor:g}" if c["method"] == "paired bootstrap" and c["p_value"] < floor else f"{c['p_value']:.3g}"
        rows.append([f"{d['ship']} - {n}", _signed(c["diff"], key),
                     f"{_signed(ci[0], key)} to {_signed(ci[1], key)}" if ci else "-", p,
                     c["method"], "yes" if c.get("significant") else "no"])
    return [("h2", f"Paired comparisons on {label(key)}"),
            ("p", f"Each algorithm against the one to ship, on the same {s['n']} "
                  f"{'images' if s['task'] == 'detection' else 'samples'}: significant when p < 0.05 (McNemar) "
                  "or when the 95 % interval of the difference excludes 0 (paired bootstrap)."),
            ("table", ["difference", "value", "95 % CI", "p-value", "test", "significant"], rows)]


def fp32_blocks(report: dict, s: dict) -> list[tuple]:
    out = []
    for k, f in (s.get("fp32") or {}).items():
        out.append(f"FP32 {label(k)}: {fig_cell(f, k)}, n={f['n']}" + (f" ({f['boxes']} boxes)" if "boxes" in f
                                                                          else ""))
    fp = report.get("fp32_task") or {}
    if s["task"] == "detection" and fp.get("vs_fp32"):
        thr = s.get("conf_threshold")
        out.append(f"FP32 scored against its own boxes (a check of the decoding, 1.0 expected): mAP50:95 "
                   f"{num(fp['vs_fp32'].get('map50_95'))}; its {s.get('fp32_boxes')} boxes "
                   + (f"of confidence {thr:g} or more " if thr is not None else "above the confidence threshold ")
                   + "are the reference of every 'vs FP32' figure.")
    return [("list", out)] if out else []


def method_text(s: dict) -> str:
    b = s.get("bootstrap")
    layers = any(s.get("worst_layers", {}).values())
    if not b:
        return ""
    over = f"{b['unit']}s ("
    if b.get("resampled") == "groups":
        over = (f"source photos ({b['groups']} groups of dependent {b['unit']}s, e.g. crops of one photo, "
                "resampled whole; " + ("top-1 agreement compared with the clustered McNemar test; "
                                       if s.get("task") == "classification" else ""))
    return (f"Intervals: {int(b['level'] * 100)} % bootstrap percentile intervals over {over}{b['resamples']} "
            f"resamples, seed {b['seed']}); every algorithm is resampled with the same draws, so differences are "
            "paired." + (" Per-layer figures below carry intervals made the same way." if layers else ""))


_INLINE = re.compile(r"\*\*(.+?)\*\*|`(.+?)`")


def _inline_html(text: str) -> str:
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        out.append(f"<b>{_inline_html(m.group(1))}</b>" if m.group(1) is not None
                   else f"<code>{html.escape(m.group(2))}</code>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def to_markdown(blocks: list[tuple]) -> str:
    lines = []
    for b in blocks:
        kind = b[0]
        if kind == "h1":
            lines += [f"# {b[1]}", ""]
        elif kind == "h2":
            lines += [f"## {b[1]}", ""]
        elif kind == "p":
            lines += [b[1], ""]
        elif kind == "warn":
            lines += [f"> **{b[1]}**", ""]
        elif kind == "code":
            lines += ["```sh", b[1], "```", ""]
        elif kind == "list":
            lines += [f"- {i}" for i in b[1]] + [""]
        elif kind == "table":
            lines += ["| " + " | ".join(b[1]) + " |", "|" + "---|" * len(b[1])]
            lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in b[2]] + [""]
        elif kind in ("img", "imgs"):
            lines += [f"(charts in report.html: {b[1] if kind == 'img' else 'histograms'})", ""]
    return "\n".join(lines).rstrip() + "\n"


def to_html(blocks: list[tuple], title: str) -> str:
    body = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{_inline_html(b[1])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{_inline_html(b[1])}</p>")
        elif kind == "warn":
            body.append(f'<p class="warn">{_inline_html(b[1])}</p>')
        elif kind == "code":
            body.append(f"<pre>{html.escape(b[1])}</pre>")
        elif kind == "list":
            body.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{_inline_html(h)}</th>" for h in b[1])
            rows = "".join("<tr" + (' class="ship"' if str(r[0]).endswith("(ship)") else "") + ">"
                           + "".join(f"<td>{_inline_html(str(c))}</td>" for c in r) + "</tr>" for r in b[2])
            body.append(f"<table><tr>{head}</tr>{rows}</table>")
        elif kind == "img":
            body.append(f'<figure><img src="data:image/png;base64,{b[2]}" alt="{html.escape(b[1])}"></figure>')
        elif kind == "imgs":
            body.append("".join(f'<figure><img src="data:image/png;base64,{p}" alt="{html.escape(t)}">'
                                f"<figcaption>{html.escape(t)}</figcaption></figure>" for t, p in b[1]))
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:14px}tr.ship{background:#e8f5e9}"
             "figure{display:inline-block;margin:4px}figcaption{font-size:12px;max-width:470px;overflow:hidden}"
             "pre{background:#f6f6f6;padding:8px;font-size:13px;overflow-x:auto}.warn{color:#a00}")
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
