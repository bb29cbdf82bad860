"""A test kit for plugin authors (opt-in, like pytest's ``pytester``).

Enable it in your plugin's ``tests/conftest.py``::

    pytest_plugins = ["patchspec.testing"]

or import the helpers directly (``from patchspec.testing import make_model, run_spec``).
Nothing here runs at import time and nothing is registered with pytest unless you ask for it.

- :func:`make_model`: a tiny ONNX model (IR version 8, which every supported ONNX Runtime loads).
- :func:`run_spec`: write a spec and a model into a folder, run ``patchspec`` on it in-process,
  and get a :class:`SpecRun` with ``exit_code``, ``stdout``, ``stderr``, ``output_model``,
  ``assert_success()`` and ``assert_failed(code)``.
- :func:`registered`: make a plugin that is not installed visible to the command line run.
- :func:`patch_context`: a real ``PatchContext`` for calling ``apply`` directly in a unit test;
  ``context.fail`` raises ``PatchError`` and ``context.state`` is a fresh ``RunState``.
- :func:`check_patch_type`, :func:`check_verifier`: the contract checks patchspec runs on its own
  built-ins, one line per type (see ``patchspec.testing.checks``).
- :func:`run_cli`: run any ``patchspec`` command in-process: ``(exit code, stdout, stderr)``.

The kit needs pytest only for the ``patchspec_run`` fixture: ``pip install patchspec[testkit]``.
- fixture ``patchspec_run``: :func:`run_spec` bound to the test's ``tmp_path``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto, helper

from patchspec.host.installed import in_process_plugin
from patchspec.plugin.contract import PatchType, Verifier

IR_VERSION = 8  #: helper.make_model writes a newer IR than onnxruntime accepts; test models use 8
MODEL_FILE = "model.onnx"
OUTPUT_FILE = "out/model.onnx"
SPEC_FILE = "spec.yaml"
SPEC_HEADER = f"patchspec: 1\nmodel: {MODEL_FILE}\noutput: {OUTPUT_FILE}\n"

Shape = Sequence["int | str | None"]


def make_model(
    inputs: Mapping[str, Shape] | None = None,
    outputs: Mapping[str, Shape] | None = None,
    *,
    nodes: Iterable[onnx.NodeProto] | None = None,
    depth: int = 1,
    initializers: Iterable[onnx.TensorProto] = (),
    dtype: int = TensorProto.FLOAT,
    opset: int = 17,
    doc_string: str | None = None,
) -> onnx.ModelProto:
    """A small model: ``make_model(inputs={"x": ("N", 3, 8, 8)})``.

    Without ``nodes``, each input ``x`` goes through ``depth`` Relu nodes to an output of the same
    shape, named ``y`` when there is one input, else ``y_<input>``. Dims are ints (fixed), strings
    (``dim_param``) or None (unknown). ``doc_string`` is set on the model, graph, nodes and
    value infos, for plugins that deal with documentation.
    """
    inputs = dict(inputs if inputs is not None else {"x": ("N", 3, 8, 8)})
    if nodes is None:
        names = {name: ("y" if len(inputs) == 1 else f"y_{name}") for name in inputs}
        nodes = [node for name in inputs for node in _relu_chain(name, names[name], depth)]
        outputs = outputs if outputs is not None else {names[n]: shape for n, shape in inputs.items()}
    if outputs is None:
        msg = "make_model: give 'outputs' when you give 'nodes' (which tensors are the graph's outputs)"
        raise ValueError(msg)
    graph = helper.make_graph(
        list(nodes),
        "patchspec_testing",
        [helper.make_tensor_value_info(name, dtype, list(shape)) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, dtype, list(shape)) for name, shape in outputs.items()],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    if doc_string is not None:
        _set_doc_strings(model, doc_string)
    return model


def _relu_chain(source: str, target: str, depth: int) -> list[onnx.NodeProto]:
    names = [source] + [f"{source}_relu{i}" for i in range(1, depth)] + [target]
    return [
        helper.make_node("Relu", [a], [b], name=f"{source}_relu_node{i}")
        for i, (a, b) in enumerate(zip(names, names[1:]))
    ]


def _set_doc_strings(model: onnx.ModelProto, text: str) -> None:
    model.doc_string = text
    model.graph.doc_string = text
    for item in [*model.graph.node, *model.graph.input, *model.graph.output]:
        item.doc_string = text


@dataclass
class SpecRun:
    """What one ``patchspec`` command did: exit code, output streams, the spec and its output."""

    args: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    spec_path: Path
    output_path: Path | None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def output_model(self) -> onnx.ModelProto:
        """The written output model (graph and inline weights)."""
        if self.output_path is None or not self.output_path.is_file():
            msg = f"{self.describe()}\nno output model was written (expected {self.output_path})"
            raise AssertionError(msg)
        return onnx.load(str(self.output_path), load_external_data=False)

    def describe(self) -> str:
        return f"patchspec {' '.join(self.args)} -> exit {self.exit_code}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"

    def assert_success(self) -> SpecRun:
        if self.exit_code != 0:
            raise AssertionError(f"expected exit 0\n{self.describe()}")
        return self

    def assert_failed(self, code: int, *, match: str | None = None) -> SpecRun:
        """Expect exit ``code`` (1 verify, 2 spec, 3 file, 4 patch, 5 bug) and ``match`` in the output."""
        if self.exit_code != code:
            raise AssertionError(f"expected exit {code}\n{self.describe()}")
        if match is not None and match not in self.output:
            raise AssertionError(f"expected {match!r} in the output\n{self.describe()}")
        return self


def run_spec(
    folder: Path,
    spec_text: str,
    model: onnx.ModelProto | Path | None = None,
    *,
    plugins: Iterable[object] = (),
    command: str = "apply",
    args: Sequence[str] = (),
) -> SpecRun:
    """Write ``spec_text`` (and ``model``) into ``folder`` and run ``patchspec COMMAND spec.yaml``.

    ``spec_text`` without a ``patchspec:`` line gets :data:`SPEC_HEADER` in front (model
    ``model.onnx``, output ``out/model.onnx``). ``model`` is saved as ``folder/model.onnx``.
    ``plugins`` are modules (or ``(name, module)`` pairs) made visible with :func:`registered`.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not any(line.startswith("patchspec:") for line in spec_text.splitlines()):
        spec_text = SPEC_HEADER + spec_text
    spec_path = folder / SPEC_FILE
    spec_path.write_text(spec_text, encoding="utf-8")
    if isinstance(model, onnx.ModelProto):
        onnx.save(model, str(folder / MODEL_FILE))
    elif model is not None:
        (folder / MODEL_FILE).write_bytes(Path(model).read_bytes())
    argv = (command, SPEC_FILE, *args)
    with contextlib.ExitStack() as stack:
        for plugin in plugins:
            name, module = plugin if isinstance(plugin, tuple) else (None, plugin)
            stack.enter_context(registered(module, name=name))
        exit_code, stdout, stderr = run_cli(argv, cwd=folder)
    return SpecRun(argv, exit_code, stdout, stderr, spec_path, _output_path(spec_text, folder))


def run_cli(argv: Sequence[str], *, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run ``patchspec ARGV`` in this process from ``cwd``: (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from patchspec.cli import main

    previous = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with CliRunner().isolation() as (out, err, *_):
            code = main([str(a) for a in argv])
            return code, out.getvalue().decode(), err.getvalue().decode()
    finally:
        os.chdir(previous)


def _output_path(spec_text: str, folder: Path) -> Path | None:
    import yaml

    try:
        data = yaml.safe_load(spec_text)
    except yaml.YAMLError:
        return None
    output = data.get("output") if isinstance(data, dict) else None
    return (folder / output).resolve() if isinstance(output, str) else None


@contextlib.contextmanager
def registered(plugin: object, *, name: str | None = None) -> Iterator[object]:
    """Make ``plugin`` (a module or object with ``@hookimpl`` functions) a plugin named ``name``.

    Every registry loaded inside the ``with`` block (so every ``patchspec`` command run in this
    process) includes it, in place of an installed plugin of the same name. ``name`` defaults to
    the module's name without a ``patchspec_`` prefix (``patchspec_acme`` -> ``acme``); the
    plugin's type names must start with ``<name>.``.
    """
    name = name or _default_name(plugin)
    with in_process_plugin(name, plugin):
        yield plugin


def _default_name(plugin: object) -> str:
    module_name = getattr(plugin, "__name__", None)
    if not isinstance(module_name, str):
        msg = f"registered({plugin!r}): give name='...' (the prefix of its type names)"
        raise ValueError(msg)
    return module_name.rsplit(".", 1)[-1].removeprefix("patchspec_")


def _pytest_fixtures() -> Callable[..., Any]:
    import pytest

    @pytest.fixture
    def patchspec_run(tmp_path: Path) -> Callable[..., SpecRun]:
        """``patchspec_run(spec_text, model, plugins=(), command="apply", args=())`` in ``tmp_path``."""

        def run(spec_text: str, model: onnx.ModelProto | Path | None = None, **kwargs: Any) -> SpecRun:
            return run_spec(tmp_path, spec_text, model, **kwargs)

        return run

    return patchspec_run


try:  # fixtures exist only where pytest is installed; the helpers above never need it
    patchspec_run = _pytest_fixtures()
except ImportError:  # pragma: no cover - pytest is not installed
    pass


from patchspec.testing.checks import check_patch_type, check_types, check_verifier, schema_problems  # noqa: E402
from patchspec.testing.contexts import patch_context, verify_context  # noqa: E402


def filled(plugin: type[PatchType[Any]] | type[Verifier[Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as the spec loader hands them to ``plugin``: its schema's defaults filled in. For unit
    tests that call ``apply``/``verify`` directly (since plugin API 1.1, plugins read defaults from
    their params, not from code)."""
    from patchspec.spec.load import apply_defaults

    result: dict[str, Any] = apply_defaults(plugin.params_schema, dict(params))
    return result


__all__ = [
    "IR_VERSION",
    "SPEC_HEADER",
    "SpecRun",
    "check_patch_type",
    "check_types",
    "check_verifier",
    "filled",
    "make_model",
    "patch_context",
    "registered",
    "run_cli",
    "run_spec",
    "schema_problems",
    "verify_context",
]
