"""patchspec in Bazel: a patched ONNX model built from a reviewed spec, in the sandbox.

This folder is a repository; `patchspec bazel-path` prints it. In the WORKSPACE (WORKSPACE mode, not
bzlmod; tested with Bazel 4.2.3):

    # the folder differs per machine: link it, git-ignored (ln -sfn "$(patchspec bazel-path)" patchspec-bazel),
    # or give --override_repository=patchspec="$(patchspec bazel-path)" instead
    local_repository(name = "patchspec", path = "patchspec-bazel")
    load("@patchspec//:patchspec.bzl", "patchspec_tool")
    patchspec_tool(name = "patchspec_tool")   # the installed `patchspec`, as @patchspec_tool//:patchspec
                                              # (patchspec_model's default `patchspec`: keep the name)

In a BUILD file:

    load("@patchspec//:patchspec.bzl", "patchspec_model")
    patchspec_model(
        name = "det_b8",
        spec = "specs/det_b8.yaml",
        model = "models/det.onnx",               # given to patchspec as --model
        model_data = ["models/det.onnx.data"],   # the model's external data files
        data = ["data/x.npy", "data/ref.npz"],   # every file the spec's steps read (file:, against:)
        out = "det_b8.onnx",                     # given as --output
        out_data = ["det_b8.onnx.data"],         # the output's data files, as patchspec names them
    )

Confinement (docs/security.md): the action stages every declared input at its workspace path in a
private folder and passes that folder as `--root`, so the spec's paths may lead only to declared
inputs. A declared input must be the file its workspace path names: one that is a link to somewhere
else (a `data/x.npy` in a pull request that links to `~/.ssh/id_rsa`) fails the action before
patchspec reads a byte. The files the spec's steps read (`data`) are staged as hard links or copies;
the model and its data as links, read as `--model` (onnxruntime's rule: its data beside it).

The action runs `patchspec -q apply` (which verifies before it writes) in an environment of
PATH=/bin:/usr/bin and ORT_DISABLE_TELEMETRY=1 only, and fails when patchspec fails, with patchspec's
message.
"""

# Every declared input is placed in a private folder at its workspace path (short_path), and that
# folder is the project root: the spec's relative paths (`file:`, `against:`) find the inputs Bazel gave
# the action, source or generated, and nothing else. Each input's real file must end in its workspace
# path: a source file that is itself a link (to a secret, or anywhere) is refused, never followed. The
# spec is copied (patchspec takes a spec's folder as named), the files the steps read are hard-linked
# or copied (so they lie in the root), and the model and its data are linked to their real files
# (`--model`: its data may lie beside it). With strict_paths the model and its data are copied too:
# --strict-paths refuses data reached through a link.
_SCRIPT = r"""set -euo pipefail
tool=$1 spec=$2 model=$3 strict=$4 label=$5 count=$6
shift 6
outs=("${@:1:$count}")
shift "$count"
execroot=$PWD
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
while (($#)); do  # how (copy, file or link), the workspace path, the path in the execroot
  real=$(readlink -f "$execroot/$3")
  if [[ $real != */"$2" ]]; then  # the file its workspace path names, wherever Bazel keeps the tree
    echo "$label: the declared input $2 is a link to $real; declare the file itself" >&2
    exit 1
  fi
  case $2 in */*) mkdir -p "$stage/${2%/*}" ;; esac
  case $1 in
    copy) cp "$real" "$stage/$2" ;;
    file) ln "$real" "$stage/$2" 2>/dev/null || cp "$real" "$stage/$2" ;;
    *) ln -s "$real" "$stage/$2" ;;
  esac
  shift 3
done
# the project root: the folder of declared inputs, each at its workspace path; nothing else is in it
flags=(--root "$stage")
if [[ $strict == 1 ]]; then flags+=(--strict-paths); fi
cd "$stage"
"$execroot/$tool" -q apply "$spec" --model "$model" --output "$execroot/${outs[0]}" --depfile "$stage/.d" \
  ${flags[@]+"${flags[@]}"}
# the depfile's targets are the files patchspec wrote: each must be declared, or Bazel drops it
esc() { local p=${1//\\/\\\\}; p=${p// /\\ }; p=${p//#/\\#}; p=${p//:/\\:}; printf '%s' "${p//\$/\$\$}"; }
expected=
for out in "${outs[@]}"; do expected+="${expected:+ }$(esc "$execroot/$out")"; done
IFS= read -r line < "$stage/.d"
written=${line%%: *}
if [[ $written != "$expected" ]]; then
  prefix="$(esc "$execroot")/"
  echo "$label: patchspec wrote ${written//"$prefix"/}; the rule declares ${expected//"$prefix"/}" >&2
  echo "  hint: out_data lists the output's data files: OUT.data, or the external_data patch's location" >&2
  exit 1
fi
"""

def _staged_path(file):
    # a file's workspace path; another repository's files go under external/
    path = file.short_path
    return "external/" + path[3:] if path.startswith("../") else path

def _patchspec_model_impl(ctx):
    outs = [ctx.outputs.out] + ctx.outputs.out_data
    spec, model = ctx.file.spec, ctx.file.model
    copied = [model] + ctx.files.model_data if ctx.attr.strict_paths else []
    staged = {}
    for file in ctx.files.data + [model] + ctx.files.model_data + [spec]:
        staged[_staged_path(file)] = file
    tool = ctx.executable.patchspec
    args = ctx.actions.args()
    args.add_all([tool.path, _staged_path(spec), _staged_path(model)])
    args.add_all(["1" if ctx.attr.strict_paths else "0", str(ctx.label), str(len(outs))])
    args.add_all([out.path for out in outs])
    read = ctx.files.data
    for path, file in staged.items():
        how = "copy" if file == spec or file in copied else ("file" if file in read else "link")
        args.add_all([how, path, file.path])
    ctx.actions.run_shell(
        command = _SCRIPT,
        arguments = [args],
        inputs = staged.values(),
        tools = [ctx.attr.patchspec[DefaultInfo].files_to_run],  # a *_binary's runfiles too
        outputs = outs,
        # onnxruntime would save a telemetry ID in the home folder: read-only in the sandbox, a warning
        env = {"PATH": "/bin:/usr/bin", "ORT_DISABLE_TELEMETRY": "1"},
        use_default_shell_env = False,
        mnemonic = "Patchspec",
        progress_message = "patchspec %s (%s)" % (spec.short_path, ctx.label),
    )
    return [DefaultInfo(files = depset(outs), runfiles = ctx.runfiles(files = outs))]

patchspec_model = rule(
    implementation = _patchspec_model_impl,
    doc = "Builds OUT (and OUT_DATA) with `patchspec apply SPEC --model MODEL --output OUT`, verified.",
    attrs = {
        "spec": attr.label(mandatory = True, allow_single_file = [".yaml", ".yml"], doc = "the spec"),
        "model": attr.label(mandatory = True, allow_single_file = True, doc = "the input model (--model)"),
        "model_data": attr.label_list(allow_files = True, doc = "the input model's external data files"),
        "data": attr.label_list(allow_files = True, doc = "files the spec's steps read: `file:` inputs, `against:` references"),
        "out": attr.output(mandatory = True, doc = "the output model (--output)"),
        "out_data": attr.output_list(doc = "the output's data files: OUT.data, or the external_data patch's location"),
        "strict_paths": attr.bool(default = False, doc = "run with --strict-paths, on copies of the model and its data"),
        "patchspec": attr.label(
            default = Label("@patchspec_tool//:patchspec"),
            executable = True,
            cfg = "exec",
            allow_files = True,
            doc = "the patchspec executable; default: the one patchspec_tool wraps",
        ),
    },
)

# The wrapper names the version of every plugin, built-ins (patchspec's) included, and it is an input of
# every action: upgrading patchspec or a plugin rebuilds (after `bazel sync --configure`, or once the
# Bazel server restarts). Its path is in the key too: machines that share a cache install patchspec at
# one path (a CI image's /opt/patchspec, say).
_WRAPPER = """#!/bin/sh
# `patchspec` as Bazel runs it, written by patchspec_tool (patchspec.bzl) from:
{versions}
exec '{path}' "$@"
"""

def _run(rctx, arguments):
    result = rctx.execute(arguments)
    if result.return_code != 0:
        fail("patchspec_tool: `%s` failed (exit %d): %s" % (" ".join(arguments), result.return_code, result.stderr))
    return result.stdout.strip()

def _patchspec_tool_impl(rctx):
    path = rctx.attr.path or rctx.os.environ.get("PATCHSPEC") or rctx.which("patchspec")
    if not path:
        fail("patchspec_tool: no `patchspec` on PATH: install patchspec (pip install patchspec), " +
             "or set PATCHSPEC=/path/to/bin/patchspec")
    path = str(path)
    rules = str(rctx.path(Label("//:patchspec.bzl")).realpath.dirname)
    installed = _run(rctx, [path, "bazel-path"])
    if str(rctx.path(installed).realpath) != rules:
        fail("patchspec_tool: %s comes with the rules in %s, but @patchspec is %s: link the folder that " % (path, installed, rules) +
             "`patchspec bazel-path` prints, or give PATCHSPEC=/path/to/the/matching/patchspec")
    versions = []  # the built-in plugins' version is patchspec's
    for plugin in json.decode(_run(rctx, [path, "plugins", "--json"])):
        versions.append("# plugin %s: %s %s" % (plugin["name"], plugin["distribution"], plugin["version"]))
    rctx.file("patchspec", _WRAPPER.format(versions = "\n".join(versions), path = path.replace("'", "'\\''")), executable = True)
    rctx.file("BUILD.bazel", 'exports_files(["patchspec"])\n')

patchspec_tool = repository_rule(
    implementation = _patchspec_tool_impl,
    doc = "The installed `patchspec` as a label (NAME//:patchspec): `path`, else $PATCHSPEC, else `patchspec` on PATH.",
    attrs = {"path": attr.string(doc = "absolute path of the patchspec executable")},
    environ = ["PATCHSPEC", "PATH"],
    local = True,
    configure = True,
)
