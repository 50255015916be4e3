"""Multi-input models: an .npz per input, the text source (tokenizers), recipes mapping data to inputs, and a
tiny transformer calibrated, converted to Q/DQ and evaluated from both."""
import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

pytest.importorskip("tokenizers")

from calib.calibrate import calibrate  # noqa: E402
from calib.cli import main  # noqa: E402
from calib.data.sources import make_source  # noqa: E402
from calib.errors import DataError, RecipeError  # noqa: E402
from calib.quantize.cache import read_cache  # noqa: E402
from calib.quantize.model import inspect_model  # noqa: E402
from calib.quantize.qdq import insert_qdq  # noqa: E402
from calib.recipe import DataSpec, PreprocessSpec, load_recipe  # noqa: E402
from conftest import tiny_transformer, wordpiece_tokenizer  # noqa: E402

LINES = ["the cat sat on the mat", "", "   ", "a big red dog ran far", "cats sat", "the small dogs ran",
         "a red cat", "the dog sat on a big mat", "unknownword the cat"]
MATMUL_INPUTS = {"tok", "q", "kt", "probs", "v", "ctx"}  # the activations the MatMuls read (K^T through Transpose)


@pytest.fixture
def model(tmp_path):
    return tiny_transformer(tmp_path / "bert.onnx")


@pytest.fixture
def text(tmp_path):
    (tmp_path / "lines.txt").write_text("\n".join(LINES) + "\n")
    wordpiece_tokenizer(tmp_path / "tokenizer.json")
    return tmp_path / "lines.txt", tmp_path / "tokenizer.json"


def _ids(n=10, s=12, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 32, (n, s)).astype(np.int64)
    mask = (np.arange(s)[None, :] < rng.integers(3, s + 1, (n, 1))).astype(np.int64)
    return ids, mask


def _text_source(model, text, batch=4, **kw):
    spec = DataSpec(kind="text", path=str(text[0]), tokenizer=str(text[1]), max_length=12, **kw)
    return make_source(spec, PreprocessSpec(), inspect_model(model).inputs, batch)


def test_text_source_tokenizes_each_line_to_the_model_inputs(tmp_path, model, text):
    batches = list(_text_source(model, text))
    assert sum(len(b["input_ids"]) for b in batches) == 7  # the blank lines are no samples
    b = batches[0]
    assert sorted(b) == ["attention_mask", "input_ids"]  # no token_type_ids: the model does not take them
    assert b["input_ids"].dtype == np.int64 and b["attention_mask"].dtype == np.int64
    assert b["input_ids"].shape == (4, 12)
    # [CLS] the cat sat on the mat [SEP], then [PAD] (id 0) with a 0 mask
    assert b["input_ids"][0, :8].tolist() == [2, 4, 6, 8, 9, 4, 10, 3] and b["input_ids"][0, 8:].tolist() == [0] * 4
    assert b["attention_mask"][0].tolist() == [1] * 8 + [0] * 4
    with_types = tiny_transformer(tmp_path / "typed.onnx", token_types=True)
    b = next(iter(_text_source(with_types, text)))
    assert sorted(b) == ["attention_mask", "input_ids", "token_type_ids"] and not b["token_type_ids"].any()
    long = next(iter(_text_source(model, text, limit=2, seed=1)))
    assert len(long["input_ids"]) == 2


def test_text_source_truncates_and_maps_inputs(tmp_path, text):
    ids_model = tiny_transformer(tmp_path / "m.onnx")
    spec = DataSpec(kind="text", path=str(text[0]), tokenizer=str(text[1]), max_length=4)
    b = next(iter(make_source(spec, PreprocessSpec(), inspect_model(ids_model).inputs, 2)))
    assert b["input_ids"].shape == (2, 4) and b["attention_mask"].all()
    renamed = [("ids", (None, None), 7), ("mask", (None, None), 7)]
    spec = DataSpec(kind="text", path=str(text[0]), tokenizer=str(text[1]), max_length=4,
                    inputs={"ids": "input_ids", "mask": "attention_mask"})
    b = next(iter(make_source(spec, PreprocessSpec(), renamed, 2)))
    assert sorted(b) == ["ids", "mask"]
    with pytest.raises(DataError, match="nothing feeds model input 'pixels'"):
        make_source(DataSpec(kind="text", path=str(text[0]), tokenizer=str(text[1])), PreprocessSpec(),
                    [("pixels", (None, 3), 1)], 2)


def test_calibrate_from_text_and_from_npz_covers_the_matmul_inputs(tmp_path, model, text):
    res = calibrate(model, _text_source(model, text), ["minmax", "entropy"], out=tmp_path / "t")
    assert res.samples == 7
    for algo in ("minmax", "entropy"):
        cached = set(read_cache(tmp_path / "t" / f"{algo}.cache").amaxes())
        assert MATMUL_INPUTS <= cached
    ids, mask = _ids()
    np.savez(tmp_path / "d.npz", input_ids=ids, attention_mask=mask)
    res2 = calibrate(model, tmp_path / "d.npz", ["minmax"], out=tmp_path / "n")
    assert res2.samples == 10 and MATMUL_INPUTS <= set(read_cache(tmp_path / "n" / "minmax.cache").amaxes())
    # the fingerprint covers every input: another mask, another fingerprint
    np.savez(tmp_path / "d2.npz", input_ids=ids, attention_mask=np.ones_like(mask))
    res3 = calibrate(model, tmp_path / "d2.npz", ["minmax"])
    assert res3.fingerprint != res2.fingerprint
    assert calibrate(model, {"input_ids": ids, "attention_mask": mask}, ["minmax"]).fingerprint \
        == res2.fingerprint


def test_qdq_quantizes_the_matmuls_and_leaves_mask_add_and_softmax_in_float(tmp_path, model, text):
    res = calibrate(model, _text_source(model, text), ["minmax"])
    q = insert_qdq(onnx.load(str(model)), res.amax["minmax"])
    made = {o: n for n in q.graph.node for o in n.output}
    nodes = {n.name: n for n in q.graph.node}

    def dequantized(tensor):
        return tensor in made and made[tensor].op_type == "DequantizeLinear"

    matmuls = [n for n in q.graph.node if n.op_type == "MatMul"]
    assert len(matmuls) == 6
    for n in matmuls:
        assert all(dequantized(t) for t in n.input), n.name
    for name in ("mask_add", "softmax", "mask_sub", "mask_mul"):
        assert not any(dequantized(t) for t in nodes[name].input), name


def test_recipe_maps_npz_arrays_to_inputs_and_run_reports_cosine(tmp_path, model):
    ids, mask = _ids(12)
    np.savez(tmp_path / "tokens.npz", ids=ids, mask=mask)
    recipe = tmp_path / "bert.yaml"
    recipe.write_text(f"""
model: {model.name}
calibration_data: {{kind: npz, path: tokens.npz, inputs: {{input_ids: ids, attention_mask: mask}}, limit: 8}}
evaluation_data: {{kind: npz, path: tokens.npz, inputs: {{input_ids: ids, attention_mask: mask}}, offset: 8}}
calibration: {{algorithms: [minmax, percentile], batch_size: 4}}
evaluation: {{task: outputs}}
output: out
""")
    assert load_recipe(recipe).calibration_data.inputs == {"input_ids": "ids", "attention_mask": "mask"}
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["calibration"]["samples"] == 8 and rep["evaluation"]["samples"] == 4
    emb = rep["evaluation"]["configs"]["minmax"]["outputs"]["embedding"]
    assert 0.9 < emb["cosine"] <= 1.0 + 1e-9
    assert "embedding_cosine" in rep["summary"]["rows"]["minmax"]
    assert "embedding cosine vs FP32" in (tmp_path / "out" / "report.md").read_text()


def test_text_recipe_runs(tmp_path, text):
    tiny_transformer(tmp_path / "typed.onnx", token_types=True)
    recipe = tmp_path / "text.yaml"
    recipe.write_text("""
model: typed.onnx
calibration_data: {kind: text, path: lines.txt, tokenizer: tokenizer.json, max_length: 16}
calibration: {algorithms: [minmax], batch_size: 4}
output: out
""")
    r = CliRunner().invoke(main, ["run", str(recipe), "--quiet"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["calibration"]["samples"] == 7
    assert rep["evaluation"]["configs"]["minmax"]["outputs"]["embedding"]["cosine"] > 0.9


def test_cli_calibrate_and_evaluate_a_two_input_npz(tmp_path, model):
    ids, mask = _ids(8)
    np.savez(tmp_path / "d.npz", input_ids=ids, attention_mask=mask)
    inv = CliRunner().invoke
    r = inv(main, ["calibrate", str(model), "--data", str(tmp_path / "d.npz"), "--algo", "minmax",
                   "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    r = inv(main, ["evaluate", str(model), "--cache", str(tmp_path / "c" / "minmax.cache"), "--data",
                   str(tmp_path / "d.npz"), "--task", "outputs", "--limit", "6", "--out", str(tmp_path / "e")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "e" / "report.json").read_text())
    assert rep["evaluation"]["samples"] == 6
    assert 0.9 < rep["evaluation"]["configs"]["minmax"]["outputs"]["embedding"]["cosine"] <= 1.0 + 1e-9
    r = inv(main, ["calibrate", str(model), "--data", str(tmp_path / "d.npz"), "--preprocess", "unit",
                   "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--preprocess" in r.output and "d.npz" in r.output


def test_one_input_model_takes_the_npz_array_named_like_its_input(tmp_path, tiny_model):
    x = np.random.default_rng(0).normal(size=(4, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "two.npz", input=x, labels=np.arange(4))
    assert calibrate(tiny_model, tmp_path / "two.npz", ["minmax"]).samples == 4
    np.savez(tmp_path / "other.npz", a=x, b=x)
    with pytest.raises(DataError, match="'input'"):
        calibrate(tiny_model, tmp_path / "other.npz", ["minmax"])


def test_errors_name_the_input_the_file_and_the_key(tmp_path, model, text):
    ids, mask = _ids(4)
    np.savez(tmp_path / "ids_only.npz", input_ids=ids)
    with pytest.raises(DataError) as e:
        calibrate(model, tmp_path / "ids_only.npz", ["minmax"])
    assert "'attention_mask'" in str(e.value) and "ids_only.npz" in str(e.value)
    np.savez(tmp_path / "i32.npz", input_ids=ids.astype(np.int32), attention_mask=mask)
    with pytest.raises(DataError, match="input 'input_ids' is int32, the model wants int64"):
        calibrate(model, tmp_path / "i32.npz", ["minmax"])
    np.save(tmp_path / "one.npy", ids)
    with pytest.raises(DataError, match="one.npy: one array for a model of 2 inputs"):
        calibrate(model, tmp_path / "one.npy", ["minmax"])
    (tmp_path / "empty.txt").write_text("\n   \n\n")
    with pytest.raises(DataError, match="empty.txt: no text lines"):
        make_source(DataSpec(kind="text", path=str(tmp_path / "empty.txt"), tokenizer=str(text[1])),
                    PreprocessSpec(), inspect_model(model).inputs, 2)
    with pytest.raises(DataError, match="tokenizer: tokenizer file not found: .*nope.json"):
        make_source(DataSpec(kind="text", path=str(text[0]), tokenizer=str(tmp_path / "nope.json")),
                    PreprocessSpec(), inspect_model(model).inputs, 2)
    with pytest.raises(DataError, match="tokenizer: a text data source needs"):
        make_source(DataSpec(kind="text", path=str(text[0])), PreprocessSpec(), inspect_model(model).inputs, 2)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DataError, match="tokenizer: .*bad.json: not a readable tokenizer.json"):
        make_source(DataSpec(kind="text", path=str(text[0]), tokenizer=str(tmp_path / "bad.json")),
                    PreprocessSpec(), inspect_model(model).inputs, 2)


def test_recipe_errors_name_the_key(tmp_path, model, text):
    def load(data):
        p = tmp_path / "r.yaml"
        p.write_text(f"model: {model.name}\ncalibration_data: {data}\n")
        return load_recipe(p)

    with pytest.raises(RecipeError, match=r"calibration_data.tokenizer: file not found: .*missing.json"):
        load("{kind: text, path: lines.txt, tokenizer: missing.json}")
    with pytest.raises(RecipeError, match="calibration_data.inputs: expected a mapping"):
        load("{kind: npz, path: lines.txt, inputs: [ids]}")
    with pytest.raises(RecipeError, match="calibration_data.inputs.input_ids: expected a string"):
        load("{kind: npz, path: lines.txt, inputs: {input_ids: [a]}}")
    ids, mask = _ids(4)
    np.savez(tmp_path / "d.npz", ids=ids, mask=mask)
    r = load("{kind: npz, path: d.npz, inputs: {input_ids: ids, attention_mask: maks}}")
    with pytest.raises(DataError, match="d.npz: no data for model input 'attention_mask': the file has no array "
                                        "'maks'"):
        make_source(r.calibration_data, r.preprocess, inspect_model(model).inputs, 2)
    r = load("{kind: npz, path: d.npz, inputs: {input_id: ids}}")
    with pytest.raises(DataError, match="inputs: 'input_id' is not an input of the model"):
        make_source(r.calibration_data, r.preprocess, inspect_model(model).inputs, 2)


def test_evaluate_api_takes_a_dict_of_arrays_per_input(model):
    from calib.evaluate.api import evaluate

    ids, mask = _ids(6)
    res = calibrate(model, {"input_ids": ids, "attention_mask": mask}, ["minmax"])
    out = evaluate(model, {"minmax": res.amax["minmax"]}, {"input_ids": ids, "attention_mask": mask}, batch_size=4)
    assert out["samples"] == 6
    assert 0.9 < out["configs"]["minmax"]["outputs"]["embedding"]["cosine"] <= 1.0 + 1e-9
    with pytest.raises(DataError, match="one array for a model of 2 inputs"):
        evaluate(model, {"minmax": res.amax["minmax"]}, ids)


def test_text_keys_on_other_data_are_refused(tmp_path, model):
    ids, mask = _ids(4)
    np.savez(tmp_path / "d.npz", input_ids=ids, attention_mask=mask)
    spec = DataSpec(kind="npz", path=str(tmp_path / "d.npz"), max_length=8)
    with pytest.raises(DataError, match="d.npz: max_length: not for npz data"):
        make_source(spec, PreprocessSpec(), inspect_model(model).inputs, 2)
    with pytest.raises(DataError, match="inputs: not for folder data"):
        make_source(DataSpec(kind="folder", path=str(tmp_path), inputs={"input_ids": "x"}), PreprocessSpec(),
                    inspect_model(model).inputs, 2)


def test_build_with_trt_calibration_refuses_several_inputs_in_one_line(tmp_path, model):
    ids, mask = _ids(4)
    np.savez(tmp_path / "d.npz", input_ids=ids, attention_mask=mask)
    r = CliRunner().invoke(main, ["build", str(model), "--calibrator", "entropy2", "--data", str(tmp_path / "d.npz"),
                                  "-o", str(tmp_path / "m.engine")])
    assert r.exit_code == 2 and "d.npz: the model takes 2 inputs" in r.output and "--cache" in r.output


def test_cli_calibrates_and_evaluates_text(tmp_path, text):
    model = tiny_transformer(tmp_path / "typed.onnx", token_types=True)
    lines, tok = (str(p) for p in text)
    inv = CliRunner().invoke
    r = inv(main, ["calibrate", str(model), "--data", lines, "--tokenizer", tok, "--max-length", "10", "--algo",
                   "minmax,entropy", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    side = json.loads((tmp_path / "c" / "minmax.json").read_text())
    assert side["samples"] == 7 and MATMUL_INPUTS - {"tok"} | {"x"} <= set(side["amax"])
    r = inv(main, ["evaluate", str(model), "--cache", str(tmp_path / "c" / "entropy.cache"), "--data", lines,
                   "--tokenizer", tok, "--max-length", "10", "--task", "outputs", "--out", str(tmp_path / "e")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "e" / "report.json").read_text())
    assert rep["evaluation"]["samples"] == 7 and "cosine" in rep["evaluation"]["configs"]["entropy"]["outputs"][
        "embedding"]
    r = inv(main, ["calibrate", str(model), "--data", lines, "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--tokenizer" in r.output and "needs a tokenizer.json" in r.output
    r = inv(main, ["calibrate", str(model), "--data", lines, "--tokenizer", str(tmp_path / "no.json"),
                   "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--tokenizer" in r.output and "no.json" in r.output
    np.savez(tmp_path / "d.npz", input_ids=np.zeros((2, 4), np.int64))
    r = inv(main, ["calibrate", str(model), "--data", str(tmp_path / "d.npz"), "--max-length", "8",
                   "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--max-length" in r.output and "only with text data" in r.output


def test_sensitivity_ranks_the_layers_of_a_two_input_model(tmp_path, model):
    ids, mask = _ids(8)
    np.savez(tmp_path / "d.npz", input_ids=ids, attention_mask=mask)
    recipe = tmp_path / "s.yaml"
    recipe.write_text(f"""
model: {model.name}
calibration_data: {{kind: npz, path: d.npz}}
calibration: {{batch_size: 4}}
evaluation: {{batch_size: 4}}
sensitivity: {{metric: output_sqnr, samples: 4, min_sqnr_db: 60}}
output: out
""")  # a budget all INT8 misses (32 dB): a budget it meets is answered without a ranking
    r = CliRunner().invoke(main, ["--quiet", "sensitivity", str(recipe), "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "s" / "sensitivity.md").read_text()
    assert "output_sqnr on 4 images" in md and "`attn_v`" in md and "`qk`" in md


def test_text_length_defaults_to_the_models_and_int32_inputs_get_int32(text):
    from calib.data.text import TextSource, read_lines

    lines = read_lines(text[0])
    src = TextSource(lines, text[1], [("input_ids", (None, 6), 6), ("attention_mask", (None, 6), 7)], 3)
    b = next(iter(src))
    assert b["input_ids"].shape == (3, 6) and b["input_ids"].dtype == np.int32
    assert b["attention_mask"].dtype == np.int64 and len(src) == 7
    assert next(iter(TextSource(lines, text[1], [("input_ids", (None, None), 7)], 2)))["input_ids"].shape == (2, 128)
