"""What the evaluation scores, shared by `calib evaluate` and `calib recover`: --task, --head, --charset, --metric
and --postprocess, and the decoder, user metric and detection settings they make."""
from __future__ import annotations

from dataclasses import dataclass

import click

from calib.errors import CalibError


def task_options(fn):
    """The task options, as one decorator."""
    opts = [
        click.option("--task", default="outputs", show_default=True,
                     type=click.Choice(["outputs", "classification", "detection", "embedding", "text"]),
                     help="classification: top-1/top-5 agreement (and accuracy with class subfolders); detection: "
                          "mAP against FP32's detections (and the labels of a COCO/YOLO set); embedding: cosine per "
                          "sample; text: exact match and character error rate against FP32's strings (--head ctc "
                          "or a --postprocess returning strings); refused where the model's outputs do not fit."),
        click.option("--head", default="auto", show_default=True,
                     type=click.Choice(["auto", "boxes-scores", "yolov5", "yolox", "yolov8", "yolov3", "ctc"]),
                     help="Decoder of a detector's outputs (implies --task detection): boxes-scores ([N, A, 4] + "
                          "[N, A, C]), yolov5 ([N, A, 5 + C], boxes in pixels), yolox ([N, A, 5 + C] raw grid, "
                          "strides 8/16/32), yolov8 ([N, 4 + C, A]); auto: the one the output shapes fit. ctc: a "
                          "text recognizer's [N, T, C] scores, greedy decoding with blank 0 and --charset (implies "
                          "--task text)."),
        click.option("--charset", type=click.Path(dir_okay=False),
                     help="With --head ctc: the characters of classes 1, 2, ... one per line (implies --head ctc)."),
        click.option("--metric", metavar="FILE.py:FUNCTION",
                     help="Your comparison FUNCTION(fp32_outputs, int8_outputs) -> one score per sample (higher is "
                          "better; outputs as {name: array [N, ...]}); ranks the caches, reported under FUNCTION's "
                          "name."),
        click.option("--postprocess", metavar="FILE.py:FUNCTION",
                     help="Your function turning a batch of outputs {name: array} into detections (per image: boxes "
                          "[K, 4] xyxy, scores [K], classes [K]) or class scores [N, C]; the task follows what it "
                          "returns."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


@dataclass
class TaskChoice:
    task: str
    head: str
    hook: object = None  # a postprocess hook, or the built-in CTC head
    user: object = None  # a calib.evaluate.scores.user.Metric

    def detection(self, proto, model) -> tuple[str | None, object]:
        """(the head format found, the DetectionSpec) after checking that the model's outputs fit the task."""
        from calib.evaluate.tasks import check_task
        from calib.recipe import DetectionSpec

        found = None if self.hook else check_task(proto, self.task, self.head if self.task == "detection" else None,
                                                  label=str(model))
        return found, DetectionSpec(format=found) if found else DetectionSpec()


def choose_task(task: str, head: str, charset, metric, postprocess) -> TaskChoice:
    """The hooks loaded (a missing file or function: one line, before the model is read) and the task they imply."""
    hook, user = None, None
    if postprocess:
        from calib.evaluate.postprocess import load as load_hook

        hook = load_hook(postprocess)
    if metric:
        from calib.evaluate.scores.user import load_metric

        user = load_metric(metric)
    head = "ctc" if charset and head == "auto" else head
    if head == "ctc":
        hook, task = ctc_hook(hook, charset, task), "text"
    if head not in ("auto", "ctc") and task not in ("outputs", "detection"):
        raise CalibError(f"--head {head} decodes a detector's outputs: it goes with --task detection, not {task}")
    task = "detection" if head != "auto" and task == "outputs" else task
    return TaskChoice(task, head, hook, user)


def ctc_hook(hook, charset, task):
    """The built-in CTC head for --head ctc / --charset (calib.evaluate.scores.ctc)."""
    from calib.evaluate.scores.ctc import CtcHead

    if hook is not None:
        raise CalibError("--head ctc decodes the outputs itself: give it or --postprocess, not both")
    if not charset:
        raise CalibError("--head ctc: give --charset FILE, the characters of classes 1, 2, ... one per line")
    if task not in ("outputs", "text"):
        raise CalibError(f"--head ctc decodes a text recognizer's outputs: it goes with --task text, not {task}")
    return CtcHead(charset)
