"""`calib recover RECIPE.yaml`: the model, data, preprocessing, shapes, memory budget, task and deployed build of a
recipe (as `calib run` reads them) turned into a recovery's inputs. Without `evaluation_data`, the calibration data
is cut in two: the first `calib_samples` of its seeded order calibrate, the rest are held out."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from calib.data.feeding import laid_out
from calib.data.sources import make_source
from calib.errors import RecipeError
from calib.evaluate.tasks import check_task
from calib.io.memory import Budget, parse_size
from calib.quantize.model import ModelInfo, inspect_model
from calib.quantize.shapes import fix_input_shapes
from calib.recipe import Recipe, feeding
from calib.search.recover_state import Evaluation
from calib.zoo.registry import resolve


@dataclass
class RecipeInputs:
    model: str
    info: ModelInfo
    calibration: object  # a Source
    evaluation: object  # a Source
    judged: Evaluation
    memory: Budget
    batch_size: int


def split(recipe: Recipe, calib_samples: int):
    """(calibration DataSpec, evaluation DataSpec): the recipe's own, or its calibration data cut in two."""
    if recipe.evaluation_data is not None:
        return recipe.calibration_data, recipe.evaluation_data
    cd = recipe.calibration_data
    if cd.limit is not None and cd.limit <= calib_samples:
        raise RecipeError(f"{recipe.source}: calibration_data.limit {cd.limit} leaves no held-out samples after "
                          f"--calib-samples {calib_samples}: give evaluation_data, or a smaller --calib-samples")
    return (dataclasses.replace(cd, limit=calib_samples),
            dataclasses.replace(cd, offset=cd.offset + calib_samples,
                                limit=cd.limit - calib_samples if cd.limit else None))


def recipe_inputs(recipe: Recipe, calib_samples: int) -> RecipeInputs:
    from calib.pipeline import evaluation_hooks

    model = resolve(recipe.model)
    info = fix_input_shapes(inspect_model(model), recipe.input_shapes, f"{recipe.source}: input_shapes")
    batch_axes, consts = feeding(recipe)
    info = laid_out(model, info, batch_axes, consts, f"{recipe.source}: inputs.batch_axis")
    ev = recipe.evaluation
    hook, user = evaluation_hooks(recipe)
    if hook is None:
        check_task(model, ev.task, ev.detection.format if ev.task == "detection" else None, "evaluation.task",
                   f"{recipe.source}: model {model}", "evaluation.detection.format")
    cal, held = split(recipe, calib_samples)
    csrc = make_source(cal, recipe.preprocess, info, recipe.calibration.batch_size, consts=consts)
    esrc = make_source(held, recipe.preprocess, info, ev.batch_size, consts=consts)
    memory = Budget(parse_size(recipe.memory_budget, "memory_budget"), "memory_budget")
    task = "text" if ev.charset else ev.task
    return RecipeInputs(str(model), info, csrc, esrc, Evaluation(task, ev.detection, hook, user), memory,
                        ev.batch_size)
