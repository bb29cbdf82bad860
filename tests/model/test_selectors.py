"""Node selectors: every field, graph scopes, expect forms, static checks, speed."""

from __future__ import annotations

import time
import types

import jsonschema
import pytest
from onnx import helper

from helpers import graph_model, tensor_info, write_spec
from patchspec import PatchResult, PatchType, hookimpl
from patchspec.errors import PatchError
from patchspec.host.installed import in_process_plugin
from patchspec.model.selector_schema import SELECTOR_SCHEMA, check_selector, parse_expect
from patchspec.model.selectors import select_nodes
from scrfd_like import chain_model, fpn_model, if_model


class FailingContext:
    """Stands in for a PatchContext: ``fail`` raises what the engine would."""

    def fail(self, message, *, key=(), hint=None):
        raise PatchError(f"{'.'.join(map(str, key))}: {message}", hint)


def names(model, selector):
    return [ref.node.name for ref in select_nodes(model, selector, FailingContext())]


def failure(model, selector) -> PatchError:
    with pytest.raises(PatchError) as caught:
        select_nodes(model, selector, FailingContext())
    return caught.value


# -- pattern fields ----------------------------------------------------------------------------------
def test_op_type_glob_and_list_mean_or():
    model = fpn_model()
    assert names(model, {"op_type": "Res*"}) == ["/up.1/Resize", "/up.0/Resize"]
    assert names(model, {"op_type": ["Add", "Relu"], "expect": 5}) == [
        "/fpn.1/Add",
        "/fpn.0/Add",
        "/head.0/Relu",
        "/head.1/Relu",
        "/head.2/Relu",
    ]


def test_name_regex_is_matched_in_full():
    model = fpn_model()
    assert names(model, {"name": r"re:/lat\.[01]/Conv"}) == ["/lat.0/Conv", "/lat.1/Conv"]
    assert names(model, {"name": r"re:lat", "expect": 0}) == []  # a full match, not a search


def test_fields_are_anded():
    model = fpn_model()
    assert names(model, {"op_type": "Conv", "name": "/lat.*"}) == ["/lat.0/Conv", "/lat.1/Conv", "/lat.2/Conv"]
    assert names(model, {"op_type": "Conv", "consumes": "c4"}) == ["/backbone.c5/Conv", "/lat.1/Conv"]
    assert names(model, {"op_type": "Relu", "produces": "out[12]"}) == ["/head.1/Relu", "/head.2/Relu"]


def test_domain_default_is_empty_string():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="std"),
        helper.make_node("Gelu", ["a"], ["y"], name="ms", domain="com.microsoft"),
    ]
    model = graph_model(nodes, [tensor_info("x", [1])], [tensor_info("y", [1])])
    assert names(model, {"domain": ""}) == ["std"]
    assert names(model, {"domain": "com.*"}) == ["ms"]


# -- after / before ------------------------------------------------------------------------------------
def test_after_and_before_select_one_fpn_level():
    model = fpn_model()
    level = {"after": "c4", "before": "/fpn.1/Add_output_0"}
    assert names(model, level) == ["/backbone.c5/Conv", "/lat.1/Conv", "/lat.2/Conv", "/up.1/Resize", "/fpn.1/Add"]
    stem = {"after": "input.1", "before": "/lat.0/Conv_output_0"}
    assert names(model, stem) == ["/backbone.c3/Conv", "/lat.0/Conv"]


def test_after_is_downstream_and_before_is_upstream():
    model = fpn_model()
    assert names(model, {"after": "/fpn.1/Add_output_0"}) == [
        "/up.0/Resize",
        "/fpn.0/Add",
        "/head.0/Relu",
        "/head.1/Relu",
    ]
    assert names(model, {"before": ["out2", "c3"]}) == [
        "/backbone.c3/Conv",
        "/backbone.c4/Conv",
        "/backbone.c5/Conv",
        "/lat.2/Conv",
        "/head.2/Relu",
    ]


def test_unknown_tensor_fails_with_close_matches():
    error = failure(fpn_model(), {"after": "/lat.0/Conv_output"})
    assert "'/lat.0/Conv_output' named in 'after' is not in the model" in error.message
    assert error.message.startswith("select.after:")
    assert "(did you mean '/lat.0/Conv_output_0'" in error.message


# -- subgraphs -----------------------------------------------------------------------------------------
def test_main_scope_skips_subgraph_nodes():
    model = if_model()
    assert names(model, {"op_type": "Add", "expect": 0}) == []
    refs = select_nodes(model, {"op_type": "Add", "graph": "all"}, FailingContext())
    assert [(r.node.name, r.graph_path) for r in refs] == [("then_add", "main/If_0.then_branch")]
    assert refs[0].graph.name == "then" and refs[0].node in refs[0].graph.node


def test_reachability_follows_outer_scope_reads():
    model = if_model()
    # the If reads x only inside its branches: it is still downstream of x
    assert names(model, {"after": "x"}) == ["pre", "If_0", "post", "side"]
    assert names(model, {"after": "x", "graph": "all"}) == [
        "pre",
        "If_0",
        "else_neg",
        "then_add",
        "then_mul",
        "post",
        "side",
    ]
    assert names(model, {"before": "y", "graph": "all"}) == ["If_0", "else_neg", "then_add", "then_mul", "post"]


def test_reachability_leaves_a_subgraph_through_its_owner():
    model = if_model()
    assert names(model, {"after": "t1", "graph": "all"}) == ["If_0", "then_mul", "post"]
    assert names(model, {"after": "t1", "before": "branch", "graph": "all"}) == ["If_0", "then_mul"]


def test_loop_body_inputs_are_fed_by_the_loop():
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"], name="body_add"),
        ],
        "body",
        [tensor_info("i", [], 7), tensor_info("cond_in", [], 9), tensor_info("acc_in", [1])],
        [tensor_info("cond_out", [], 9), tensor_info("acc_out", [1])],
    )
    nodes = [
        helper.make_node("Loop", ["n", "c", "x"], ["y"], name="loop", body=body),
        helper.make_node("Relu", ["step"], ["z"], name="other"),
    ]
    model = graph_model(
        nodes,
        [tensor_info("n", [], 7), tensor_info("c", [], 9), tensor_info("x", [1]), tensor_info("step", [1])],
        [tensor_info("y", [1]), tensor_info("z", [1])],
    )
    assert names(model, {"after": "x", "graph": "all"}) == ["loop", "body_cond", "body_add"]
    assert names(model, {"before": "y", "op_type": "Add", "graph": "all"}) == ["body_add"]


# -- expect ------------------------------------------------------------------------------------------------
def test_expect_exact_and_at_least():
    model = fpn_model()
    assert len(names(model, {"op_type": "Conv", "expect": 6})) == 6
    assert len(names(model, {"op_type": "Conv", "expect": "6+"})) == 6
    assert len(names(model, {"op_type": "Conv", "expect": "0+"})) == 6
    assert names(model, {"op_type": "LSTM", "expect": 0}) == []


def test_expect_exact_mismatch_names_selector_count_and_nodes():
    error = failure(fpn_model(), {"op_type": "Resize", "expect": 1})
    assert "selector {op_type: Resize, expect: 1} matched 2 nodes, expected exactly 1" in error.message
    assert "/up.1/Resize (Resize), /up.0/Resize (Resize)" in error.message


def test_expect_at_least_mismatch():
    error = failure(fpn_model(), {"op_type": "Add", "expect": "3+"})
    assert "matched 2 nodes, expected at least 3" in error.message


def test_default_expect_is_one_or_more_and_explains_an_empty_match():
    error = failure(fpn_model(), {"op_type": "Conv", "name": "/lat.9/*"})
    assert "matched 0 nodes, expected at least 1" in error.message
    assert "op_type alone matches 6" in error.hint and "name alone matches 0" in error.hint


def test_an_op_type_or_tensor_no_node_has_gets_the_closest_ones_the_graph_has():
    error = failure(fpn_model(), {"op_type": "Conv2d", "consumes": "/lat.0/Conv_outptu"})
    assert "op_type 'Conv2d' is on no node in scope (did you mean 'Conv'?)" in error.hint
    assert "consumes '/lat.0/Conv_outptu' is on no node in scope (did you mean '/lat.0/Conv_output_0'" in error.hint
    assert "is on no node" not in failure(fpn_model(), {"op_type": "Conv*", "name": "/lat.9/*"}).hint  # patterns


def test_mismatch_lists_at_most_ten_nodes():
    error = failure(chain_model(15), {"op_type": "Relu", "expect": 3})
    assert "matched 15 nodes, expected exactly 3" in error.message
    assert "n9 (Relu)" in error.message and "n10 (Relu)" not in error.message
    assert "and 5 more" in error.message


def test_subgraph_nodes_say_where_they_are():
    error = failure(if_model(), {"op_type": ["Add", "Neg"], "graph": "all", "expect": 1})
    assert "then_add (Add in main/If_0.then_branch)" in error.message
    assert "else_neg (Neg in main/If_0.else_branch)" in error.message


@pytest.mark.parametrize("expect, parsed", [(0, (0, True)), (4, (4, True)), ("1+", (1, False)), ("12+", (12, False))])
def test_parse_expect(expect, parsed):
    assert parse_expect(expect) == parsed


# -- static checks and schema ------------------------------------------------------------------------
def test_check_selector_accepts_a_valid_selector():
    assert list(check_selector({"op_type": "Conv", "name": ["re:/lat\\.[0-2]/.*", "x*"], "expect": "2+"})) == []


def test_check_selector_reports_invalid_regex_with_its_error():
    problems = list(check_selector({"name": ["ok*", "re:/lat.(0"], "produces": "re:[a-"}))
    keys = [key for key, _ in problems]
    assert keys == [("name", 1), ("produces",)]
    assert "invalid regular expression '/lat.(0': missing ), unterminated subpattern" in problems[0][1]


@pytest.mark.parametrize("expect", [-1, "3-", "+3", True, 1.5, "many"])
def test_check_selector_reports_bad_expect(expect):
    problems = list(check_selector({"op_type": "Conv", "expect": expect}))
    assert problems and problems[0][0] == ("expect",)
    assert "'N+'" in problems[0][1]


def test_check_selector_reports_unknown_keys_with_suggestions():
    problems = list(check_selector({"optype": "Conv"}))
    assert problems == [(("optype",), "unknown selector key 'optype' (did you mean 'op_type'?)")]


def test_schema_describes_every_field_and_rejects_unknown_keys():
    assert SELECTOR_SCHEMA["additionalProperties"] is False
    assert all("description" in field for field in SELECTOR_SCHEMA["properties"].values())
    validator = jsonschema.Draft202012Validator(SELECTOR_SCHEMA)
    assert not list(validator.iter_errors({"op_type": ["Conv"], "graph": "all", "expect": "3+", "after": "x"}))
    for bad in ({"optype": "Conv"}, {"expect": "3-"}, {"expect": -1}, {"graph": "sub"}, {"name": []}, {"expect": True}):
        assert list(validator.iter_errors(bad)), bad


# -- speed ---------------------------------------------------------------------------------------------
def test_after_before_is_one_traversal_on_a_20000_node_chain():
    """Linear, not quadratic: ten times the nodes takes about ten times as long (a quadratic walk,
    a hundred). Compared on this machine in this run, so a busy machine does not fail it."""

    def fastest(nodes: int) -> float:
        model = chain_model(nodes)
        selector = {"after": "t10", "before": f"t{nodes - 100}", "expect": nodes - 110}
        times = []
        for _ in range(3):
            started = time.perf_counter()
            refs = select_nodes(model, selector, FailingContext())
            times.append(time.perf_counter() - started)
        assert refs[0].node.name == "n11" and refs[-1].node.name == f"n{nodes - 100}"
        return min(times)

    small, large = fastest(2_000), fastest(20_000)
    assert large / small < 40, f"2,000 nodes: {small:.3f} s, 20,000 nodes: {large:.3f} s"


# -- through validate: a plugin that embeds SELECTOR_SCHEMA -------------------------------------------
class PickPatch(PatchType):
    name = "seltest.pick"
    description = "test patch type that selects nodes"
    params_schema = {
        "type": "object",
        "properties": {"select": SELECTOR_SCHEMA},
        "required": ["select"],
        "additionalProperties": False,
    }

    def check_params(self, params):
        for key, message in check_selector(params["select"]):
            yield ("select", *key), message

    def apply(self, model, params, context):
        refs = select_nodes(model, params["select"], context)
        return PatchResult(False, f"{len(refs)} nodes")


def _plugin():
    module = types.ModuleType("seltest_plugin")
    module.register_patch_types = hookimpl(lambda register: register(PickPatch))
    return module


@pytest.mark.parametrize(
    "select, message",
    [
        ('{name: "re:/lat.(0"}', "select.name: invalid regular expression '/lat.(0'"),
        ('{op_type: Conv, expect: "2-"}', "select.expect:"),
        ("{optype: Conv}", "unknown key 'optype' (did you mean 'op_type'?)"),
    ],
)
def test_validate_rejects_bad_selectors_with_exit_2(tmp_path, run_cli, select, message):
    spec = write_spec(
        tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches:\n  - seltest.pick:\n      select: {select}\n"
    )
    with in_process_plugin("seltest", _plugin()):
        result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "spec.yaml:6:" in result.output


def test_apply_fails_with_exit_4_on_count_mismatch(tmp_path, run_cli):
    import onnx

    onnx.save(fpn_model(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: o.onnx\npatches:\n"
        "  - seltest.pick:\n      select: {op_type: Conv, expect: 2}\n",
    )
    with in_process_plugin("seltest", _plugin()):
        result = run_cli("apply", spec)
    assert result.exit_code == 4, result.output
    assert "matched 6 nodes, expected exactly 2" in result.output
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("pattern", ["re:(a+)+$", "re:(a|ab)*c", "re:x{2,5}(y*)*", "re:((a*)b)*", "re:" + "a" * 600])
def test_a_pattern_that_can_backtrack_exponentially_is_refused(pattern):
    """A spec from a pull request must not hang patchspec on a node name (issue 32: an unbounded re:)."""
    problems = list(check_selector({"name": pattern}))
    assert problems and ("exponential" in problems[0][1] or "at most 500" in problems[0][1]), problems


@pytest.mark.parametrize(
    "pattern", ["re:Conv_[0-9]+", "re:(Conv|Relu)_[0-9]+", "re:.*encoder.*", "re:(ab)+", "re:a{3}"]
)
def test_ordinary_patterns_pass(pattern):
    assert list(check_selector({"name": pattern})) == []
