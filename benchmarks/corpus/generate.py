"""Generate the corpus models that no wheel ships: classical ML converters, quantization, torch exporters.

    make corpus-generate                                    # both venvs, every family
    .venv-corpus-gen/bin/python benchmarks/corpus/generate.py sklearn onnxmltools catboost torch quant
    .venv-corpus-tf/bin/python benchmarks/corpus/generate.py keras tflite
    python benchmarks/corpus/generate.py torch_families   # in a venv with torch 2.14.1 and torchvision 0.29.1

Each family is written by the converter a user would call, at pinned versions (CORPUS_GEN_PINS and
CORPUS_TF_PINS in the Makefile), into benchmarks/corpus/generated/<package>/ where <package> is the
[[package]] of models.toml that lists it. Weights and data come from fixed seeds; nothing is downloaded.
The .onnx files are committed (each under 200 KB), so `make corpus` needs none of these converters;
models.toml pins each file's sha256, and a regenerated file that differs must be pinned again. What would
change from run to run is left out: dynamo's per-node stack traces, CatBoost's training time and model guid,
onnxmltools' random graph name (each model is named after its file), tf2onnx's from_tflite numbering of the
constants it folds (numbered again in the order they are read), and the order of opset_import
(sorted by domain here; some converters list it in a set's order). Every file comes out byte for byte the same
again, except the Keras family's: tf2onnx numbers the nodes its optimizer makes (``Transpose__20``) and keeps
one of an LSTM's two identical zero-state subgraphs in an order that varies from run to run, so node names
and order may differ (checked on 2026-11-28 over four runs: the same ops and the same weights every time;
keras_cnn_op9 and keras_cnn_op9_b1 came out as committed in each, the others vary). The TFLite RNNs
(tflite_*_b1 but the CNN) vary the same way: the order of a Loop body's nodes, and so the numbers its folded
constants get (checked over four runs: the same ops and weights).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "generated"
SEED = 0


def _save(package: str, name: str, model: object) -> None:
    """Write the model as the converter made it, less the stack traces dynamo records per node (file paths
    and line numbers of this script: the bytes would change with the checkout's folder)."""
    folder = OUT / package
    folder.mkdir(parents=True, exist_ok=True)
    for node in model.graph.node:  # type: ignore[attr-defined]
        kept = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    opsets = sorted(model.opset_import, key=lambda o: o.domain)  # type: ignore[attr-defined]
    del model.opset_import[:]  # type: ignore[attr-defined]
    model.opset_import.extend(opsets)  # type: ignore[attr-defined]  # converters list them in set order
    data = model.SerializeToString()  # type: ignore[attr-defined]
    (folder / name).write_bytes(data)
    print(f"generate: {package}/{name} ({len(data) // 1024} KB)")


def _tabular(rows: int = 120, features: int = 4, classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 0.8).astype(np.int64) * (classes > 2)
    return x, y


# -- skl2onnx ------------------------------------------------------------------------------------------------
def sklearn() -> None:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType, StringTensorType
    from sklearn.cluster import KMeans
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import LabelEncoder, OneHotEncoder, StandardScaler

    x, y = _tabular()
    floats = [("X", FloatTensorType([None, 4]))]
    # a classifier whose probabilities are a ZipMap (a sequence of maps), the converter's default
    model = LogisticRegression(max_iter=500).fit(x, y)
    _save("skl2onnx", "logreg_zipmap.onnx", to_onnx(model, initial_types=floats, target_opset=17))
    # string class labels: output_label is a STRING tensor, the ZipMap keyed by the names
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    model = LogisticRegression(max_iter=500).fit(x, names)
    _save("skl2onnx", "logreg_string_labels.onnx", to_onnx(model, initial_types=floats, target_opset=17))
    # a LabelEncoder over letters: a STRING input [N]
    encoder = LabelEncoder().fit(list("abcdefgh"))
    converted = to_onnx(encoder, initial_types=[("letters", StringTensorType([None]))], target_opset=17)
    _save("skl2onnx", "label_encoder_strings.onnx", converted)
    # one-hot over a string column beside scaled numbers, then a classifier without ZipMap
    rng = np.random.default_rng(SEED)
    city = rng.choice(["paris", "lima", "oslo", "kyiv"], size=(120, 1))
    columns = ColumnTransformer(
        [("city", OneHotEncoder(handle_unknown="ignore"), [0]), ("num", StandardScaler(), [1, 2, 3])]
    )
    joined = np.concatenate([city.astype(object), x[:, :3].astype(object)], axis=1)
    pipe = Pipeline([("columns", columns), ("clf", LogisticRegression(max_iter=500))]).fit(joined, y)
    types = [("city", StringTensorType([None, 1])), ("num", FloatTensorType([None, 3]))]
    converted = to_onnx(pipe, initial_types=types, target_opset=17, options={"zipmap": False})
    _save("skl2onnx", "onehot_string_column.onnx", converted)
    # DOUBLE in and out
    target = x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1
    pipe = Pipeline([("scale", StandardScaler()), ("reg", LinearRegression())]).fit(x.astype(np.float64), target)
    converted = to_onnx(pipe, initial_types=[("X", DoubleTensorType([None, 4]))], target_opset=17)
    _save("skl2onnx", "scaler_linear_double.onnx", converted)
    # (a TfidfVectorizer is left out: ONNX Runtime's StringNormalizer needs the en_US.UTF-8 locale)
    # an MLP without ZipMap, k-means (label and distances), a small forest (TreeEnsembleRegressor)
    model = MLPClassifier(hidden_layer_sizes=(16,), max_iter=300, random_state=SEED).fit(x, y)
    _save(
        "skl2onnx",
        "mlp_classifier.onnx",
        to_onnx(model, initial_types=floats, target_opset=17, options={"zipmap": False}),
    )
    model = KMeans(n_clusters=3, n_init=3, random_state=SEED).fit(x)
    _save("skl2onnx", "kmeans.onnx", to_onnx(model, initial_types=floats, target_opset=17))
    model = RandomForestRegressor(n_estimators=5, max_depth=4, random_state=SEED).fit(x, target)
    _save("skl2onnx", "random_forest_regressor.onnx", to_onnx(model, initial_types=floats, target_opset=17))


# -- onnxmltools: LightGBM and XGBoost -------------------------------------------------------------------------
def onnxmltools() -> None:
    import lightgbm
    import xgboost
    from onnxmltools import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _tabular()
    target = x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1
    types = [("input", FloatTensorType([None, 4]))]
    options = {"n_estimators": 8, "num_leaves": 7, "random_state": SEED, "verbose": -1}
    model = lightgbm.LGBMClassifier(**options).fit(x, (y > 0).astype(int))
    _save(
        "onnxmltools",
        "lgbm_binary_zipmap.onnx",
        convert_lightgbm(model, name="lgbm_binary_zipmap", initial_types=types, target_opset=15),
    )
    model = lightgbm.LGBMClassifier(**options).fit(x, y)
    converted = convert_lightgbm(model, name="lgbm_multiclass", initial_types=types, target_opset=15, zipmap=False)
    _save("onnxmltools", "lgbm_multiclass.onnx", converted)
    model = lightgbm.LGBMRegressor(**options).fit(x, target)
    _save(
        "onnxmltools",
        "lgbm_regressor.onnx",
        convert_lightgbm(model, name="lgbm_regressor", initial_types=types, target_opset=15),
    )
    model = xgboost.XGBClassifier(n_estimators=8, max_depth=3, random_state=SEED).fit(x, y)
    _save(
        "onnxmltools",
        "xgb_multiclass.onnx",
        convert_xgboost(model, name="xgb_multiclass", initial_types=types, target_opset=15),
    )
    model = xgboost.XGBRegressor(n_estimators=8, max_depth=3, random_state=SEED).fit(x, target)
    _save(
        "onnxmltools",
        "xgb_regressor.onnx",
        convert_xgboost(model, name="xgb_regressor", initial_types=types, target_opset=15),
    )


# -- catboost's own exporter ---------------------------------------------------------------------------------
def catboost() -> None:
    import onnx
    from catboost import CatBoostClassifier, CatBoostRegressor

    x, y = _tabular()
    target = x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1
    options = {"iterations": 8, "depth": 3, "random_seed": SEED, "verbose": 0}
    here = Path.cwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # catboost trains into ./catboost_info, a name the model records
        try:
            for name, model, labels in (
                ("catboost_multiclass.onnx", CatBoostClassifier(**options), y),
                ("catboost_regressor.onnx", CatBoostRegressor(**options), target),
            ):
                model.fit(x, labels)
                model.save_model(name, format="onnx")
                converted = onnx.load(name)
                kept = [p for p in converted.metadata_props if p.key not in ("train_finish_time", "model_guid")]
                del converted.metadata_props[:]
                converted.metadata_props.extend(kept)  # the same bytes every time
                _save("catboost", name, converted)
        finally:
            os.chdir(here)


# -- torch: in generate_torch.py ------------------------------------------------------------------------------
def torch_models() -> None:
    from generate_torch import torch_models as export_all

    export_all(_save, SEED)


# -- hummingbird: scikit-learn models as tensor programs, through torch.onnx (TorchScript) ----------------------
def hummingbird() -> None:
    """hummingbird 0.4.12 asks torch.onnx.export for TorchScript's exporter without saying so (torch 2.13
    defaults to dynamo, which cannot trace it): it gets ``dynamo=False``. Traced at 2 rows, batch dynamic;
    one at 1 row, which mixes samples above batch 1 (a control)."""
    import functools

    import torch

    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)
    from hummingbird.ml import convert
    from sklearn.decomposition import PCA
    from sklearn.ensemble import (
        GradientBoostingRegressor,
        HistGradientBoostingClassifier,
        IsolationForest,
        RandomForestClassifier,
    )
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _tabular(classes=2)
    estimators = {
        "gbr_gemm.onnx": (GradientBoostingRegressor(n_estimators=5, max_depth=3, random_state=SEED), {}),
        "rf_tree_trav.onnx": (
            RandomForestClassifier(n_estimators=5, max_depth=3, random_state=SEED),
            {"tree_implementation": "tree_trav"},
        ),
        "iforest.onnx": (IsolationForest(n_estimators=5, random_state=SEED), {}),
        "scaler_pca_logreg.onnx": (make_pipeline(StandardScaler(), PCA(2), LogisticRegression()), {}),
    }
    for name, (estimator, extra) in estimators.items():
        estimator.fit(x, y)
        _save("hummingbird-ml", name, convert(estimator, "onnx", x[:2], extra_config=extra).model)
    # traced at one row: the Transpose after a Squeeze without axes is elided, so above batch 1 the rows mix
    boosted = HistGradientBoostingClassifier(max_iter=5, random_state=SEED).fit(x, y)
    _save("hummingbird-ml", "hgb_one_row.onnx", convert(boosted, "onnx", x[:1]).model)


# -- onnxruntime.quantization: dynamic (DynamicQuantizeLinear) and static (QDQ, QOperator) --------------------
def quant() -> None:
    import onnx
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from torch import nn

    torch.manual_seed(SEED)

    class Seq2Seq(nn.Module):
        """A GRU encoder and a linear head per step."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(6, 16)
            self.gru = nn.GRU(16, 16, batch_first=True)
            self.head = nn.Linear(16, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden, _ = self.gru(torch.relu(self.embed(x)))
            return self.head(hidden)

    class Lstm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True)
            self.head = nn.Linear(16, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.lstm(x)[0])

    cnn = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 5),
    ).eval()

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(SEED)
            self.items = iter([{"x": rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(16)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name, module, sample in (
            ("gru_seq2seq", Seq2Seq().eval(), torch.randn(1, 5, 6)),
            ("lstm_tagger", Lstm().eval(), torch.randn(1, 5, 8)),
        ):
            plain = root / f"{name}.onnx"
            torch.onnx.export(
                module,
                (sample,),
                str(plain),
                input_names=["x"],
                output_names=["y"],
                dynamo=False,
                opset_version=17,
                dynamic_axes={"x": {0: "batch", 1: "time"}, "y": {0: "batch", 1: "time"}},
            )
            quantized = root / f"{name}_dynamic_int8.onnx"
            quantize_dynamic(str(plain), str(quantized), weight_type=QuantType.QInt8)
            _save("onnxruntime-quantization", quantized.name, onnx.load(str(quantized)))
        plain = root / "cnn.onnx"
        torch.onnx.export(
            cnn,
            (torch.randn(1, 3, 8, 8),),
            str(plain),
            input_names=["x"],
            output_names=["y"],
            dynamo=False,
            opset_version=17,
        )
        for form, name in (
            (QuantFormat.QDQ, "cnn_static_qdq.onnx"),
            (QuantFormat.QOperator, "cnn_static_qlinear.onnx"),
        ):
            out = root / name
            quantize_static(str(plain), str(out), Reader(), quant_format=form, per_channel=False)
            _save("onnxruntime-quantization", name, onnx.load(str(out)))


# -- tf2onnx: Keras models and TFLite, in generate_tf.py ---------------------------------------------------------
def keras() -> None:
    from generate_tf import keras as export_all

    export_all(_save, SEED)


def torch_families() -> None:
    from generate_torch_families import torch_families as export_all

    export_all(_save, SEED)


def tflite() -> None:
    from generate_tf import tflite as export_all

    export_all(_save, SEED)


FAMILIES: dict[str, Callable[[], None]] = {
    "sklearn": sklearn,
    "onnxmltools": onnxmltools,
    "catboost": catboost,
    "torch": torch_models,
    "quant": quant,
    "keras": keras,
    "hummingbird": hummingbird,
    "tflite": tflite,
    "torch_families": torch_families,
}


def main() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":  # converters iterate over sets of names: fix their order
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    wanted = sys.argv[1:] or list(FAMILIES)
    unknown = sorted(set(wanted) - set(FAMILIES))
    if unknown:
        raise SystemExit(f"generate: unknown families {unknown}; known: {sorted(FAMILIES)}")
    for family in wanted:
        FAMILIES[family]()


if __name__ == "__main__":
    main()
