"""Every figure an evaluation reports, for configurations whose outputs are at hand: the same tallies as
calib.evaluate.api.evaluate (outputs, classification, detection, strings, vectors, the user's metric), fed batch
by batch with FP32's outputs and each configuration's, read back as point values (cheap: what a search compares)
or with their intervals (calib.evaluate.confidence), named as in report.json."""
from __future__ import annotations

from calib.data.groups import group_of
from calib.evaluate.detect import DetectionTally
from calib.evaluate.heads import image_hw
from calib.evaluate.layerwise import Comparison
from calib.evaluate.metrics import Classification
from calib.evaluate.scores.tally import ScoreTally
from calib.recipe import DetectionSpec


class TaskScores:
    """Tallies of `names` (configurations) against FP32 on the same batches. `task` as calib evaluate takes it
    (outputs | classification | detection | embedding | text); `hook` a postprocess hook (its first result
    decides the task, as in evaluate); `user` a calib.evaluate.scores.user.Metric."""

    def __init__(self, names, task: str, outputs, detection: DetectionSpec = DetectionSpec(), hook=None,
                 user=None, reference: bool = True):
        """reference: FP32's detections scored too (against the dataset's boxes: fp32_points), at the cost of
        one more mAP."""
        self.names, self.task, self.outputs = list(names), task, list(outputs)
        self.detection, self.hook, self.user = detection, hook, user
        self.comps = {n: Comparison(n, outputs=tuple(self.outputs)) for n in self.names}
        self.cls = {n: Classification() for n in self.names}
        self.reference = reference
        self.det = DetectionTally(detection, self.names, self.outputs, score_reference=reference, decoder=hook) \
            if task == "detection" else None
        self.tally = ScoreTally(metric=user) if user is not None else None
        self.n = 0
        self.groups: list = []
        self.labelled_groups: list = []
        self._det_res = None

    def update(self, batch: dict, samples, meta, ref: dict, tests: dict) -> None:
        """One batch: FP32's outputs `ref` and each configuration's (name -> outputs) on the canonical `batch`."""
        from calib.evaluate.api import _labelled, _scores, _tally, hook_task

        k = int(next(iter(batch.values())).shape[0])
        samples = samples if samples is not None else [None] * k
        meta = meta if meta is not None else [None] * k
        gs = [group_of(s, self.n + j) for j, s in enumerate(samples)]
        self.groups += gs
        self.labelled_groups += [g for s, g in zip(samples, gs) if _labelled(s)]
        if self.hook is not None and self.n == 0:
            self.task = hook_task(self.hook, ref, self.task, self.outputs)
            if self.task == "detection" and self.det is None:
                self.det = DetectionTally(self.detection, self.names, self.outputs,
                                          score_reference=self.reference, decoder=self.hook)
            if self.task in ("text", "embedding"):
                self.tally = ScoreTally("text" if self.task == "text" else "vectors", self.user)
        for name, test in tests.items():
            self.comps[name].update(ref, test)
        if self.tally is not None:
            _tally(self.tally, self.hook, ref, tests, self.outputs)
        if self.task == "classification":
            labels = [getattr(s, "label", None) for s in samples]
            r = _scores(self.hook, ref, self.outputs)
            for name, test in tests.items():
                self.cls[name].update(r, _scores(self.hook, test, self.outputs), labels)
        if self.det is not None:
            self.det.update(ref, tests, samples, meta, self.n, image_hw(batch))
        self.n += k

    def _detections(self) -> dict:
        if self._det_res is None:
            self._det_res = self.det.result()
        return self._det_res

    def points(self, name: str) -> dict:
        """name -> point value of every figure this configuration has (None where it cannot be measured)."""
        out: dict = {}
        c = self.comps[name]
        sq = []
        for o in self.outputs:
            if o in c.tensors:
                r = c.tensors[o].result()
                out[f"{o}_sqnr_db"], out[f"{o}_cosine"] = r["sqnr_db"], r["cosine"]
                sq.append(r["sqnr_db"])
        if sq:
            out["min_output_sqnr_db"] = min(sq)
        if self.task == "classification":
            r = self.cls[name].result()
            out.update(agreement_top1=r["agreement_top1"], agreement_top5=r["agreement_top5"])
            if "test_top1" in r:
                out.update(top1=r["test_top1"], top5=r["test_top5"])
        if self.det is not None:
            res = self._detections()[name]
            for ref, suffix in (("vs_fp32", "vs_fp32"), ("vs_labels", "labels")):
                if ref in res:
                    out[f"map50_95_{suffix}"] = res[ref].get("map50_95")
                    out[f"map50_{suffix}"] = res[ref].get("map50")
                    out[f"recall_{suffix}"] = res[ref].get("recall")
        if self.tally is not None:
            out.update({k: v for k, v in self.tally.entry(name).items() if k != "samples"})
        elif self.task == "embedding":
            from calib.evaluate import confidence

            x = confidence.sample_cosines(c)
            out.update(mean_cosine=float(x.mean()), min_cosine=float(x.min()))
        return out

    def fp32_boxes(self) -> int | None:
        """FP32's confident boxes (the pseudo-labels of mAP vs FP32), or None for a task without boxes."""
        return self._detections()["fp32_boxes"] if self.det is not None else None

    def fp32_points(self) -> dict:
        """FP32's own figures against the dataset's labels (top1, top5, map50_95_labels, ...), where it has
        labels; FP32 against itself is 1 (agreement, mAP vs FP32) or an infinite SQNR."""
        out: dict = {}
        if self.task == "classification" and self.names:
            r = self.cls[self.names[0]].result()
            if "ref_top1" in r:
                out.update(top1=r["ref_top1"], top5=r["ref_top5"])
        if self.det is not None:
            lab = self._detections().get("fp32", {}).get("vs_labels")
            if lab:
                out.update(map50_95_labels=lab.get("map50_95"), map50_labels=lab.get("map50"))
        return out

    def figures(self, name: str) -> dict:
        """The configuration's figures with their 95 % intervals, as report.json's `intervals`."""
        from calib.evaluate.api import _intervals

        result = {"configs": {n: {"task": self._detections()[n]} if self.det is not None else {}
                              for n in self.names}}
        if self.det is not None:
            result["fp32_task"] = self._detections().get("fp32", {})
        _intervals(result, self.names, self.task, self.outputs, self.comps, self.cls, self.det, self.groups,
                   self.labelled_groups, self.tally)
        return result["configs"][name]["intervals"]
