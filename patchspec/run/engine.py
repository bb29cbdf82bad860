"""Run a spec: validated spec -> loaded model -> patched model -> staged output -> verdicts -> commit.

Data flows one way; no stage reaches back. Patches run in the order the spec lists them. Plugins
are called through ``patchspec.host.boundary``, which reports their faults with the plugin's name
and version; nothing is committed unless every patch and verifier passed.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import onnx

from patchspec.errors import (
    ModelFileError,
    PatchError,
    SpecError,
)
from patchspec.host.boundary import Guard
from patchspec.host.registry import PluginRegistry
from patchspec.interrupts import deferred
from patchspec.model.data_names import DIGEST_FIELD
from patchspec.model.data_writer import (
    OUTPUT_LAYOUT,
    Layout,
    default_layout,
    refuse_input_overwrite,
    write_model,
)
from patchspec.model.external_data import data_files, validate_external_data
from patchspec.model.graph import sync_initializer_inputs
from patchspec.model.io import FileStamp, load_model
from patchspec.plugin.contract import COUPLED, UNDECIDED, PatchContext, RunState, VerifyContext
from patchspec.printable import shown_path
from patchspec.run.build import Build
from patchspec.run.commit import Staging, remove_superseded
from patchspec.run.depfile import Depfile
from patchspec.run.freshness import Freshness, LoadedInput, existing_digest, same_files, settle
from patchspec.run.io_changes import io_changes
from patchspec.run.model_paths import missing_model, refuse_same_file
from patchspec.run.ownership import protected_files, refuse_data_file, refuse_foreign
from patchspec.run.report import RunReport, StepOutcome, verification_failed, verifier_outcome
from patchspec.run.reporter import Reporter
from patchspec.run.request import BuildRequest
from patchspec.run.stamp import data_ranges, data_record, digest_of, stamp_model
from patchspec.run.statcache import StatCache, file_sha256
from patchspec.spec.catalog import StepKind
from patchspec.spec.confine import Root, check_model_path, check_output_path, within
from patchspec.spec.steps import Spec, Step

Echo = Callable[[str], None]
T = TypeVar("T")
BUILD = BuildRequest()  # a plain ``apply SPEC``


def _within_root(method: Callable[..., T]) -> Callable[..., T]:
    """Run an Engine command with the spec's project root as the run's (sessions stage data inside it)."""

    @functools.wraps(method)
    def run(self: Engine, spec: Spec, *args: Any, **kwargs: Any) -> T:
        with within(Root.of(spec.path, self.root, self.output_dirs)):
            return method(self, spec, *args, **kwargs)

    return run


class Engine:
    """Runs specs. ``echo`` is the CLI's :class:`Reporter` (lines, progress on a terminal), or any
    function that takes a line (an embedding such as the hatch hook): everything the engine says
    goes through it, and a failure's whole story goes in the error it raises."""

    def __init__(
        self,
        registry: PluginRegistry,
        echo: Reporter | Echo = print,
        *,
        verbose: bool = False,
        strict_paths: bool = False,
        root: Path | None = None,
        output_dirs: tuple[Path, ...] = (),
    ):
        self.registry = registry
        self.root = root  # --root: the project root for every spec (default: each spec's own)
        self.output_dirs = output_dirs  # --output-dir: where specs may write any name, replace any file
        self.freshness = Freshness(registry, self._hashing, self.written_dependencies)
        self.reporter = echo if isinstance(echo, Reporter) else Reporter.to(echo, 1 if verbose else 0)
        self.echo = self.reporter.line
        self.verbose = verbose or self.reporter.verbose
        self.strict_paths = strict_paths

    @classmethod
    def of(cls, registry: PluginRegistry, reporter: Reporter, request: BuildRequest) -> Engine:
        """The engine a command's :class:`BuildRequest` asks for (its paths' root and policy)."""
        return cls(
            registry, reporter, strict_paths=request.strict_paths, root=request.root, output_dirs=request.output_dirs
        )

    # -- stages ---------------------------------------------------------------------------------
    def load_input(self, spec: Spec, model: Path | None = None, output: Path | None = None) -> LoadedInput:
        model_path = (model or spec.model).absolute()
        output_path = (output or spec.output).absolute()
        root = Root.of(spec.path, self.root, self.output_dirs)
        refuse_same_file(model_path, output_path)
        if model is None:
            check_model_path(spec, root)
            if not model_path.exists():
                raise missing_model(spec, model_path)
        # a --model's data may also stay beside it (onnxruntime's own rule); the spec's model has the root only
        roots = (root.folder,) if model is None else (root.folder, model_path.parent, model_path.resolve().parent)
        with self.reporter.task(f"reading {model_path.name}"):
            proto = load_model(model_path)
            refs = validate_external_data(proto, model_path, strict_paths=self.strict_paths, roots=roots)
        paths = data_files(refs)
        ranges: dict[Path, list[tuple[int, int]]] = {}
        for ref in refs:
            ranges.setdefault(ref.path, []).append((ref.offset, ref.length))
        protected = protected_files(spec.path, model_path, paths, self.step_dependencies(spec))
        check_output_path(spec, output_path, None if output is not None else root, protected)
        stamps = [FileStamp.of(p) for p in [model_path, *paths]]
        return LoadedInput(spec, model_path, output_path, proto, paths, stamps, ranges)

    def patch(
        self, loaded: LoadedInput, report: RunReport, *, check_verifiers: bool = True, refuse_undecided: bool = False
    ) -> tuple[onnx.ModelProto, Layout | None]:
        """Apply every patch in spec order to a copy of the input; returns the model and output layout.

        Then (``check_verifiers``) each verifier checks its params against the patched model, so a
        run case that names an input the model lacks is a spec error now, not a failed run later.
        ``refuse_undecided`` (``--no-verify``): points a patch left undecided stop the run (exit 4)."""
        model = onnx.ModelProto()
        model.CopyFrom(loaded.model)
        state = RunState()  # one per run: the patches of this spec share it, nothing else does
        for step in loaded.spec.patches:
            self.check_steps(loaded.spec, [step], model)
            context = PatchContext(loaded.spec, step, model_dir=loaded.model_path.parent, state=state)
            with self.reporter.task(step.type_name):  # the status line: its name and seconds, if slow
                outcome = self._run_patch(step, model, context)
            report.patches.append(outcome)
            self.reporter.outcome(step.type_name, outcome, self.verbose)
        report.coupled = state.get(COUPLED)
        if check_verifiers:
            self.check_steps(loaded.spec, loaded.spec.verify, model)
        undecided = state.get(UNDECIDED)
        if refuse_undecided and undecided:
            more = f" (and {len(undecided) - 1} more)" if len(undecided) > 1 else ""
            raise PatchError(
                f"{loaded.spec.path}: the patches left {len(undecided)} point{'s' * (len(undecided) != 1)} undecided "
                f"and --no-verify skips the verifiers that would judge them, so nothing is written: {undecided[0]}{more}",
                "run with verification, settle them with the patches -v lists, or pass --allow-undecided "
                "to write the model anyway",
            )
        return model, state.get(OUTPUT_LAYOUT)

    @_within_root
    def plan(self, spec: Spec, model: Path | None = None) -> RunReport:
        """What ``apply`` would do, writing nothing: each patch's line (its details with -v), then every
        graph input and output with its shape before -> after."""
        loaded = self.load_input(spec, model)
        report = RunReport(str(spec.path), str(loaded.model_path), str(loaded.output_path), status="planned")
        self.echo(
            f"plan for {spec.path} ({loaded.model_path.name} -> {shown_path(loaded.output_path)}); nothing is written"
        )
        patched, _ = self.patch(loaded, report)
        self.reporter.io_table(io_changes(loaded.model, patched))
        return report

    def check_steps(self, spec: Spec, steps: Sequence[Step], model: onnx.ModelProto) -> None:
        """Each step's ``check_model`` on ``model`` (a patch's: as the patches before it left it; a verifier's:
        the patched graph); all problems at once, as a spec error."""
        guarded = [(step, self._guard(spec, step).check_model(step.params, model)) for step in steps]
        problems = [spec.problem(step, key, message) for step, found in guarded for key, message in found]
        if problems:
            raise SpecError(problems)

    def _run_patch(self, step: Step, model: onnx.ModelProto, context: PatchContext) -> StepOutcome:
        started = time.perf_counter()
        result, before = self._guard(context.spec, step).apply(model, step.params, context)
        sync_initializer_inputs(model, before)  # IR < 4: a new initializer must be a graph input too
        status = "modified" if result.modified else "unchanged"
        return StepOutcome(step.label, status, result.summary, list(result.details), time.perf_counter() - started)

    @_within_root
    def verify(
        self,
        spec: Spec,
        output: Path,
        original: Path,
        report: RunReport,
        *,
        staged: bool = False,
        check_params: bool = False,
    ) -> None:
        """Run every verifier on the file at ``output``; raise VerificationFailed if any failed.

        ``check_params``: first check the verifiers' params against that model (``check_model``), as
        ``apply`` does after the patches; for ``patchspec verify`` on an existing output.

        Each verifier's line is echoed as it finishes; a failed one's summary and details are said
        once, in the error (which the CLI prints whatever the verbosity).
        """
        with self.reporter.task(f"reading {output.name}"):
            model = load_model(output)
        if check_params:
            self.check_steps(spec, spec.verify, model)
        failed: list[tuple[Step, StepOutcome, tuple[Any, ...]]] = []  # with the key a context.fail pointed at
        for step in spec.verify:
            with self.reporter.task(step.type_name) as task:
                context = VerifyContext(
                    spec, step, output_path=output, original_path=original, model=model, progress=task.say
                )
                outcome, key = verifier_outcome(self._guard(spec, step), step, context)
            report.verifiers.append(outcome)
            self.reporter.outcome(step.type_name, outcome, self.verbose)
            if outcome.status == "failed":
                failed.append((step, outcome, key))
        if failed:
            raise verification_failed(spec, failed, staged, report.coupled)

    # -- commands ---------------------------------------------------------------------------------
    @_within_root
    def apply(self, spec: Spec, request: BuildRequest = BUILD, report: RunReport | None = None) -> RunReport:
        """Build ``spec``'s output as ``request`` asks, top to bottom: load, plan, patch, verify,
        write, stamp; or say it is up to date. ``report`` (the command's, so it can tell how a failed
        run ended) is filled in as the build goes, and returned."""
        loaded = self.load_input(spec, request.model, request.output)
        build = self._plan(loaded, request, report)
        with ThreadPoolExecutor(max_workers=1) as pool:
            self._hash_inputs(build, pool)  # gigabytes of weights hashed while the patches run
            if build.up_to_date():
                return self._up_to_date(build)
            patched, layout = self.patch(
                loaded, build.report, check_verifiers=not request.no_verify, refuse_undecided=request.refuse_undecided
            )
            layout = self._output_layout(build, patched, layout)
            with Staging(loaded.output_path) as staging:
                staged = staging.path(loaded.output_path)
                files, written = self._write_and_verify(staged, loaded, patched, layout, build.parts, build)
                # the point of no return: from the first rename on, a signal waits until this build is
                # recorded, then ends the run (143) with the new output whole in place
                with deferred():
                    self._commit(build, staging, files, written)
        return build.report

    def _plan(self, loaded: LoadedInput, request: BuildRequest, report: RunReport | None) -> Build:
        """What this build works from: the output's place checked, its report, stat cache and depfile."""
        spec, output = loaded.spec, loaded.output_path
        root = Root.of(spec.path, self.root, self.output_dirs)
        refuse_foreign(output, [], root, lambda path: False, output_given=request.output is not None)
        report = report or RunReport(str(spec.path), str(loaded.model_path), str(output))
        dependencies = self.step_dependencies(spec)
        depfile = None
        if request.depfile is not None:
            depfile = Depfile.of(request.depfile, loaded, dependencies, request.model, request.output)
        build = Build(loaded, request, report, self._stat_cache(output), root, dependencies, depfile)
        report.inputs = [str(path) for path in build.inputs[1:]]
        return build

    def _hash_inputs(self, build: Build, pool: ThreadPoolExecutor) -> None:
        """Start the digest on ``pool``; meanwhile, what the existing output says (a stat per file, or
        its data files compared with the build's record, hashed only where their identity changed)."""
        request = build.request
        build.hashing = pool.submit(
            self.freshness.parts, build.loaded, request.no_verify, build.cache, request.allow_undecided
        )
        build.hashing.add_done_callback(
            lambda done: setattr(build.report, "digest", digest_of(done.result())) if not done.exception() else None
        )
        build.cache.waiter = build.parts  # the writer names a copied range by the input's hash of it
        build.existing = existing_digest(build.output, build.cache, request.force)

    def _output_layout(self, build: Build, patched: onnx.ModelProto, layout: Layout | None) -> Layout:
        """Where the output's tensor bytes go, refused (before anything is written) where the data file
        would replace an input, a file patchspec did not write, or a name a depfile cannot hold."""
        loaded, output = build.loaded, build.output
        layout = self._layout(loaded, patched, layout, build.parts)
        protected = protected_files(loaded.spec.path, loaded.model_path, loaded.data_paths, build.dependencies)
        refuse_input_overwrite(layout, output, protected)
        given = build.request.output is not None
        refuse_data_file(output, layout.data_name(output), build.root, build.cache.wrote, output_given=given)
        if build.depfile is not None:
            build.depfile.data_files(filter(None, [layout.data_name(output)]))
        return layout

    def _layout(
        self, loaded: LoadedInput, patched: onnx.ModelProto, layout: Layout | None, parts: Callable[[], dict[str, str]]
    ) -> Layout:
        """The patches' layout, else the input's; a content-addressed data file named by this build."""
        layout = layout or default_layout(patched, loaded.output_path, original=loaded.model)
        if layout.location and DIGEST_FIELD in layout.location:
            layout = replace(layout, location=layout.location.replace(DIGEST_FIELD, digest_of(parts())[:16]))
        return layout

    def _commit(self, build: Build, staging: Staging, files: list[Path], written: dict[str, dict[str, Any]]) -> None:
        digests = {name: entry["pieces"] for name, entry in written.items()}
        changed = staging.commit(files, digests, build.cache.known_sha256)
        build.report.files = [str(build.output.parent / f.name) for f in files]
        build.report.status = "written" if changed else "unchanged"
        self._record(build, written)

    def _up_to_date(self, build: Build) -> RunReport:
        """Nothing to build: say so, remember what was found (by reading the output or hashing, so the
        next check is a stat), and write the depfile."""
        report, cache, output, digest = build.report, build.cache, build.output, build.digest()
        report.status = "up to date"
        self.echo(f"{shown_path(output)}: up to date")
        if build.existing.stamp is not None:  # found by reading the output: the next check is a stat
            cache.record_output([output, *build.existing.stamp.data_files], digest)
        report.files = list(cache.built.get("files", {}))  # the output and its data files
        if settle([Path(f) for f in report.files], build.inputs, cache, digest) or build.existing.read or cache.hashed:
            cache.save()
        if build.depfile is not None:
            build.depfile.write(Path(f).name for f in report.files if Path(f).name != output.name)
        return report

    def _record(self, build: Build, written: dict[str, dict[str, Any]]) -> None:
        """After the commit: the stat cache's record of this build (what it wrote, by inode and sha256,
        so the next check is a stat and only these files are ever deleted) and the depfile."""
        cache, output, report = build.cache, build.output, build.report
        # a content-addressed name changes every build: the previous build's data files go, but only
        # those the stat cache proves this patchspec wrote (never what a model's metadata names)
        remove_superseded(output, cache, report.files)
        cache.keep_learned()  # the data files' sha256 by recipe: a rebuild of the same bytes reads none
        cache.record_output([Path(name) for name in report.files], build.digest())
        for name, entry in written.items():  # known at build time: the next check need not read them
            cache.remember(output.parent / name, entry["pieces"], entry["ranges"])
            cache.record_written(output.parent / name, entry["pieces"], build.cuts.get(name, []))
        sha256 = file_sha256(output)
        cache.remember(output, sha256)
        cache.record_written(output, sha256)  # identity in place, and digest: the proof it is ours
        cache.save()
        if build.depfile is not None:
            build.depfile.write(written)

    def _write_and_verify(
        self,
        staged_model: Path,
        loaded: LoadedInput,
        patched: onnx.ModelProto,
        layout: Layout,
        parts: Callable[[], dict[str, str]],
        build: Build | None,
    ) -> tuple[list[Path], dict[str, dict[str, Any]]]:
        """Write the output at ``staged_model`` (in a staging folder) and verify it there unless
        ``build`` is None (``--check``'s rebuild) or asks ``--no-verify``; returns the staged files
        and its data files' record (name -> size, pieces digest, cut)."""
        written: dict[str, dict[str, Any]] = {}

        def finalize(out: onnx.ModelProto, digests: dict[str, str]) -> None:  # the data file is written
            def pieces(path: Path, cut: list[tuple[int, int]]) -> str:  # read only where the writer did not digest
                return digests.get(path.name) or self.freshness.pieces(None, cut)(path)

            written.update(data_record(out, staged_model.parent, pieces))
            if build is not None:
                build.cuts = data_ranges(out)
            stamp_model(out, parts(), written)

        known = build.cache if build is not None else None
        link = build is not None and (build.request.no_verify or not loaded.spec.verify)  # no verifier reads it
        try:
            with self.reporter.bytes("copying weights") as progress:
                source = loaded.model_path.parent
                files = write_model(patched, staged_model, source, layout, progress, finalize, known, link)
        except OSError as exc:
            raise ModelFileError(f"{loaded.output_path}: cannot write: {exc.strerror or exc}") from None
        if build is not None and not build.request.no_verify:
            self.verify(loaded.spec, staged_model, loaded.model_path, build.report, staged=True)
        if not loaded.unchanged():
            msg = f"{loaded.model_path}: the input changed while patchspec was running; nothing was written"
            raise ModelFileError(msg, "run again once whatever writes the input has finished")
        return files, written

    @_within_root
    def check(self, spec: Spec, request: BuildRequest = BUILD) -> tuple[str, list[str]]:
        """Whether ``apply`` would rebuild, without writing anything: ("up to date" | "missing" |
        "stale", what changed since the output was built, files named by their paths)."""
        loaded = self.load_input(spec, request.model, request.output)
        cache = self._stat_cache(loaded.output_path)  # read, never written: --check writes nothing
        same = functools.partial(self._rebuilds_same, loaded)
        return self.freshness.verdict(loaded, cache, request.no_verify, request.allow_undecided, same)

    def _rebuilds_same(self, loaded: LoadedInput, parts: dict[str, str]) -> bool:
        """Whether building the output again, into a temporary folder away from the output (``--check``
        writes nothing beside it), gives the output's bytes: the check of an output no record of this
        machine vouches for. Builds are deterministic, so a committed output passes, a forged one not."""
        import tempfile

        report = RunReport(str(loaded.spec.path), str(loaded.model_path), str(loaded.output_path))
        patched, layout = self.patch(loaded, report, check_verifiers=False)
        layout = self._layout(loaded, patched, layout, lambda: parts)
        try:
            with tempfile.TemporaryDirectory(prefix="patchspec-check-") as folder:
                staged = Path(folder) / loaded.output_path.name
                files, _ = self._write_and_verify(staged, loaded, patched, layout, lambda: parts, None)
                return same_files(files, loaded.output_path.parent)
        except OSError as exc:  # TMPDIR full or missing: the machine's fault (exit 3), not a bug
            raise ModelFileError(f"cannot build in the temporary folder to compare: {exc.strerror or exc}") from None

    def _stat_cache(self, output: Path) -> StatCache:
        """The stat cache beside ``output``; one this machine did not sign is ignored, and said so."""
        cache = StatCache.beside(output)
        if cache.ignored:
            self.reporter.error(f"warning: {cache.ignored}")
        return cache

    def step_dependencies(self, spec: Spec) -> list[Path]:
        """Files the spec's steps read besides the models (npy inputs, references)."""
        return [path for _, path in self.written_dependencies(spec)]

    def written_dependencies(self, spec: Spec) -> list[tuple[str, Path]]:
        """Each step dependency as the spec writes it (``data/x.npz``) and where it is."""
        found: dict[Path, str] = {}
        for step in (*spec.patches, *spec.verify):
            for relative in self._guard(spec, step).dependencies(step.params):
                found.setdefault(Path(os.path.normpath(spec.folder / relative)), Path(relative).as_posix())
        return [(written, path) for path, written in found.items()]

    # -- plugin calls ---------------------------------------------------------------------------------
    def _guard(self, spec: Spec, step: Step) -> Guard:
        """The step's patch type or verifier, called only through the boundary (a fault is the plugin's)."""
        kind = StepKind.of_section(step.section)
        return self.registry.guard(kind, step.type_name, spec.locate(step))

    # -- what the user reads ------------------------------------------------------------------------------
    def _hashing(self, sha256: Callable[..., str]) -> Callable[[Path], str]:
        """``sha256`` with its bytes, rate and ETA on the status line while it reads a file."""

        def hashed(path: Path) -> str:
            with self.reporter.bytes(f"hashing {path.name}") as progress:
                return sha256(path) if progress is None else sha256(path, progress)

        return hashed
