"""Unit tests of cluster resolution: ClusterSpec, TF_CONFIG, torchrun and SLURM variables.

Every test passes its own ``environ`` dict; none reads or changes ``os.environ``.
"""

from __future__ import annotations

import ast
import contextlib
import json
import pathlib
import re
import warnings
from collections.abc import Iterator

import pytest

from stratagem.distribute import cluster as cluster_module
from stratagem.distribute._slurm import expand_nodelist, expand_tasks_per_node
from stratagem.distribute.cluster import (
    ClusterSpec,
    SimpleClusterResolver,
    SlurmClusterResolver,
    TFConfigClusterResolver,
    TorchrunClusterResolver,
    resolve_cluster,
)
from stratagem.errors import ConfigurationError

CHIEF_AND_WORKERS = {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222", "w2:2222"]}
SLURM_ENV = {
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "4",
    "SLURM_JOB_ID": "123456",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "SLURM_TASKS_PER_NODE": "2(x2)",
}
TORCHRUN_ENV = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}


def _tf_env(cluster: object, task: object = None, **extra: object) -> dict[str, str]:
    """A TF_CONFIG environment; ``task=None`` leaves the task out."""
    config: dict[str, object] = {"cluster": cluster, **extra}
    if task is not None:
        config["task"] = task
    return {"TF_CONFIG": json.dumps(config)}


def _tf_resolver(cluster: object, task_type: str, index: object) -> TFConfigClusterResolver:
    return TFConfigClusterResolver(_tf_env(cluster, {"type": task_type, "index": index}))


@contextlib.contextmanager
def _raises(match: str) -> Iterator[None]:
    """Expects a ConfigurationError whose message contains ``match`` literally and ends in a Received tail."""
    with pytest.raises(ConfigurationError, match=re.escape(match)) as excinfo:
        yield
    assert re.search(r"\. Received: [\w.\[\]']+=", str(excinfo.value)), str(excinfo.value)


# ---------------------------------------------------------------- ClusterSpec


def test_cluster_spec_queries_return_tf_answers() -> None:
    spec = ClusterSpec({"worker": ["w0:1", "w1:1"], "chief": ["c0:1"]})
    assert spec.jobs == ["chief", "worker"]
    assert spec.num_tasks("worker") == 2
    assert spec.task_address("worker", 1) == "w1:1"
    assert spec.as_dict() == {"chief": ["c0:1"], "worker": ["w0:1", "w1:1"]}
    assert repr(spec) == "ClusterSpec({'chief': ['c0:1'], 'worker': ['w0:1', 'w1:1']})"


def test_cluster_spec_copy_is_equal_and_independent() -> None:
    spec = ClusterSpec({"worker": ["w0:1"]})
    copy = ClusterSpec(spec)
    copy.as_dict()["worker"].append("w1:1")  # as_dict hands out a copy
    assert copy == spec
    assert copy.num_tasks("worker") == 1
    assert spec != ClusterSpec({"worker": ["w9:1"]})
    assert spec != {"worker": ["w0:1"]}


def test_empty_cluster_spec_is_falsy() -> None:
    assert not ClusterSpec({})
    assert ClusterSpec({"worker": ["w0:1"]})


def test_cluster_spec_unknown_job_lookup_raises_value_error_listing_jobs() -> None:
    with pytest.raises(ValueError, match=r"its jobs are \['worker'\].*Received: job_name='ps'"):
        ClusterSpec({"worker": ["w0:1"]}).num_tasks("ps")


def test_cluster_spec_task_index_past_end_raises_value_error() -> None:
    with pytest.raises(ValueError, match="Received: task_index=1"):
        ClusterSpec({"worker": ["w0:1"]}).task_address("worker", 1)


# ---------------------------------------------------------------- TF_CONFIG: valid layouts


def test_chief_and_workers_map_chief_to_rank_zero_and_worker_i_to_i_plus_one() -> None:
    chief = _tf_resolver(CHIEF_AND_WORKERS, "chief", 0)
    assert (chief.rank, chief.world_size, chief.is_chief()) == (0, 4, True)
    for index in range(3):
        worker = _tf_resolver(CHIEF_AND_WORKERS, "worker", index)
        assert (worker.task_type, worker.task_id, worker.rank) == ("worker", index, index + 1)
        assert not worker.is_chief()
        assert (worker.master_addr, worker.master_port) == ("c0", 2222)


def test_worker_only_cluster_makes_worker_zero_the_chief() -> None:
    cluster = {"worker": ["w0:2000", "w1:2001"]}
    first, second = _tf_resolver(cluster, "worker", 0), _tf_resolver(cluster, "worker", 1)
    assert (first.rank, first.is_chief(), second.rank, second.is_chief()) == (0, True, 1, False)
    assert (second.world_size, second.master_addr, second.master_port) == (2, "w0", 2000)


def test_ps_and_evaluator_tasks_have_rank_none_and_are_not_counted() -> None:
    cluster = {**CHIEF_AND_WORKERS, "ps": ["p0:2222", "p1:2222"], "evaluator": ["e0:2222"]}
    for task_type, index in (("ps", 1), ("evaluator", 0)):
        resolver = _tf_resolver(cluster, task_type, index)
        assert (resolver.rank, resolver.world_size, resolver.is_chief()) == (None, 4, False)
        assert (resolver.local_rank, resolver.local_world_size) == (0, 1)
        assert (resolver.master_addr, resolver.master_port) == ("c0", 2222)


def test_tasks_sharing_a_host_get_local_ranks_in_group_order() -> None:
    cluster = {"chief": ["a:1"], "worker": ["b:1", "a:2", "b:2", "a:3"], "ps": ["a:9"]}
    layout = {
        ("chief", 0): (0, 3),
        ("worker", 0): (0, 2),
        ("worker", 1): (1, 3),
        ("worker", 2): (1, 2),
        ("worker", 3): (2, 3),
    }
    for (task_type, index), local in layout.items():
        resolver = _tf_resolver(cluster, task_type, index)
        assert (resolver.local_rank, resolver.local_world_size) == local, (task_type, index)


def test_ipv6_addresses_resolve_to_bare_master_host() -> None:
    resolver = _tf_resolver({"worker": ["[::1]:2222", "[::1]:2223"]}, "worker", 1)
    assert (resolver.master_addr, resolver.master_port) == ("::1", 2222)
    assert (resolver.local_rank, resolver.local_world_size) == (1, 2)


def test_single_task_cluster_without_task_resolves_that_task() -> None:
    resolver = TFConfigClusterResolver(_tf_env({"worker": ["w0:2222"]}))
    assert (resolver.task_type, resolver.task_id, resolver.rank, resolver.world_size) == ("worker", 0, 0, 1)


def test_rpc_layer_and_environment_are_accepted() -> None:
    env = _tf_env({"worker": ["w0:1"]}, {"type": "worker", "index": 0}, rpc_layer="grpc", environment="cloud")
    resolver = TFConfigClusterResolver(env)
    assert (resolver.rpc_layer, resolver.environment) == ("grpc", "cloud")
    assert resolver.cluster_spec() == ClusterSpec({"worker": ["w0:1"]})


def test_unknown_tf_config_keys_warn_on_the_chief_only() -> None:
    cluster = {"worker": ["w0:1", "w1:1"]}
    with pytest.warns(UserWarning, match=r"\['extra', 'task.trial'\]") as record:
        TFConfigClusterResolver(_tf_env(cluster, {"type": "worker", "index": 0, "trial": "1"}, extra=1))
    assert len(record) == 1
    with warnings.catch_warnings(record=True) as on_worker:
        warnings.simplefilter("always")
        TFConfigClusterResolver(_tf_env(cluster, {"type": "worker", "index": 1, "trial": "1"}, extra=1))
    assert not on_worker, "only the chief warns"


def test_simple_resolver_matches_tf_config_resolver() -> None:
    simple = SimpleClusterResolver(ClusterSpec(CHIEF_AND_WORKERS), "worker", 2, rpc_layer="grpc")
    from_tf = _tf_resolver(CHIEF_AND_WORKERS, "worker", 2)
    assert repr(simple).replace("Simple", "TFConfig") == repr(from_tf)
    assert simple.cluster_spec() == from_tf.cluster_spec()
    assert simple.rpc_layer == "grpc"


# ---------------------------------------------------------------- TF_CONFIG: malformed


def test_bad_json_raises_with_error_position() -> None:
    # The position is what a user needs to find the typo; json's wording may vary by Python version.
    with _raises("at line 1 column 2 (char 1). Fix the JSON; check quotes, which must be double."):
        TFConfigClusterResolver({"TF_CONFIG": "{'cluster': {}}"})


def test_tf_config_that_is_not_an_object_raises() -> None:
    with _raises("TF_CONFIG must be a JSON object"):
        TFConfigClusterResolver({"TF_CONFIG": '["worker"]'})


def test_unset_tf_config_raises_when_resolver_is_built_directly() -> None:
    with _raises("TF_CONFIG is not set"):
        TFConfigClusterResolver({})


@pytest.mark.parametrize("tf_config", [
    "{}", '{"cluster": {}}', '{"cluster": {}, "task": {}}', '{"task": {"type": "worker", "index": 0}}',
])
def test_tf_config_without_tasks_is_one_local_worker_as_in_tf(tf_config: str) -> None:
    # TF reads a TF_CONFIG without cluster as an empty ClusterSpec: local, single-worker training.
    resolver = TFConfigClusterResolver({"TF_CONFIG": tf_config})
    assert (resolver.rank, resolver.world_size, resolver.local_rank, resolver.local_world_size) == (0, 1, 0, 1)
    assert resolver.task_type == "worker" and resolver.task_id == 0 and resolver.is_chief()
    assert resolve_cluster(environ={"TF_CONFIG": tf_config}) is None  # so a strategy trains locally
    assert isinstance(resolve_cluster(environ={"TF_CONFIG": tf_config, **TORCHRUN_ENV}), TorchrunClusterResolver)


@pytest.mark.parametrize("tf_config", [
    '{"cluster": {"worker": []}}', '{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}',
    '{"cluster": {"chief": [], "worker": []}, "task": {"type": "chief", "index": 0}}',
])
def test_cluster_of_empty_jobs_raises_as_tf(tf_config: str) -> None:
    # TF 2.21: MultiWorkerMirroredStrategy refuses these ("you must also specify task_type and task_id",
    # "task_id 0 exceeds the maximum id of worker"); it trained locally here, with no word.
    with _raises("TF_CONFIG cluster names jobs but lists no task address"):
        TFConfigClusterResolver({"TF_CONFIG": tf_config})
    with _raises("Received: cluster="):
        resolve_cluster(environ={"TF_CONFIG": tf_config})


def test_null_cluster_raises_as_tf() -> None:
    # TF: "`cluster` must be a dictionary mapping one or more job names to lists of network addresses".
    with _raises("Received: cluster=None"):
        TFConfigClusterResolver({"TF_CONFIG": '{"cluster": null, "task": {"type": "worker", "index": 0}}'})


def test_cluster_that_is_not_an_object_raises() -> None:
    with _raises("TF_CONFIG cluster must be an object"):
        TFConfigClusterResolver(_tf_env(["w0:1"], {"type": "worker", "index": 0}))


def test_cluster_without_chief_or_worker_raises() -> None:
    with _raises("TF_CONFIG cluster has neither a 'chief' nor a 'worker' task"):
        _tf_resolver({"ps": ["p0:1"], "worker": []}, "ps", 0)


def test_unknown_job_name_raises_listing_valid_names() -> None:
    with _raises("unknown job 'trainer'; the valid job names are 'chief', 'worker', 'ps', 'evaluator'"):
        _tf_resolver({"worker": ["w0:1"], "trainer": ["t0:1"]}, "worker", 0)


def test_unknown_task_type_raises_listing_valid_types() -> None:
    with _raises(
        "the valid task types here are 'chief', 'worker'. Set task.type to one of them. Received: task.type='wrker'"
    ):
        _tf_resolver(CHIEF_AND_WORKERS, "wrker", 0)


def test_missing_task_in_multi_task_cluster_raises() -> None:
    with _raises("TF_CONFIG does not say which task this process is, and the cluster has 4 tasks"):
        TFConfigClusterResolver(_tf_env(CHIEF_AND_WORKERS))


def test_task_that_is_not_an_object_raises() -> None:
    with _raises("TF_CONFIG task must be an object"):
        TFConfigClusterResolver(_tf_env(CHIEF_AND_WORKERS, ["worker", 0]))


@pytest.mark.parametrize("index", ["1", " 1 ", 1.0])
def test_task_index_as_string_or_whole_float_is_read_as_tf_does(index: object) -> None:
    # TF reads the index with int(): "1" and 1.0 name worker 1 (rank 2, after the chief).
    resolver = _tf_resolver(CHIEF_AND_WORKERS, "worker", index)
    assert resolver.task_id == 1 and resolver.rank == 2


@pytest.mark.parametrize("index", ["one", "1.0", 1.5, True, None])
def test_task_index_that_is_not_a_whole_number_raises(index: object) -> None:
    with _raises(f"TF_CONFIG task index must be a whole number, such as 0, 1 or \"1\". Set task.index to one. "
                 f"Received: task.index={index!r}"):
        _tf_resolver(CHIEF_AND_WORKERS, "worker", index)


def test_negative_task_index_raises() -> None:
    with _raises("task index is out of range: the cluster has 3 'worker' tasks, so the index must be in 0..2"):
        _tf_resolver(CHIEF_AND_WORKERS, "worker", -1)


def test_task_index_past_end_raises_with_valid_indices() -> None:
    with pytest.raises(ConfigurationError) as excinfo:
        _tf_resolver({"worker": ["w0:1", "w1:1"]}, "worker", 5)
    assert str(excinfo.value) == (
        "TF_CONFIG task index is out of range: the cluster has 2 'worker' tasks, so the index must be "
        "0 or 1. Set task.index to a valid index. Received: task.index=5"
    )


def test_address_without_port_raises() -> None:
    with _raises("TF_CONFIG address cluster['worker'][1] has no port"):
        _tf_resolver({"worker": ["w0:1", "w1"]}, "worker", 0)


def test_non_numeric_port_raises() -> None:
    with _raises("has port 'http', but a port is an integer from 1 to 65535"):
        _tf_resolver({"worker": ["w0:http"]}, "worker", 0)


@pytest.mark.parametrize("port", ["0", "65536"])
def test_out_of_range_port_raises(port: str) -> None:
    with _raises(f"has port '{port}', but a port is an integer from 1 to 65535"):
        _tf_resolver({"worker": [f"w0:{port}"]}, "worker", 0)


@pytest.mark.parametrize("address", [":2222", "[]:2222"])
def test_empty_host_raises(address: str) -> None:
    with _raises(f"TF_CONFIG address cluster['worker'][0] has an empty host"):
        _tf_resolver({"worker": [address]}, "worker", 0)


def test_unbracketed_ipv6_address_raises_with_bracketed_fix() -> None:
    with _raises("Put the host in brackets: '[::1]:2222'"):
        _tf_resolver({"worker": ["::1:2222"]}, "worker", 0)


def test_chief_and_worker_zero_with_one_address_raise_naming_both_slots() -> None:
    with _raises("two tasks, cluster['chief'][0] and cluster['worker'][0]"):
        _tf_resolver({"chief": ["h:2222"], "worker": ["H:2222", "h:2223"]}, "chief", 0)


def test_duplicate_address_between_ps_and_worker_raises() -> None:
    with _raises("Received: cluster['ps'][0]='h:9', cluster['worker'][1]='h:9'"):
        _tf_resolver({"ps": ["h:9"], "worker": ["w:1", "h:9"]}, "ps", 0)


def test_two_chiefs_raise() -> None:
    with _raises("TF_CONFIG cluster has 2 'chief' tasks, but there is at most one"):
        _tf_resolver({"chief": ["c0:1", "c1:1"], "worker": ["w0:1"]}, "worker", 0)


def test_two_evaluators_raise() -> None:
    with _raises("TF_CONFIG cluster has 2 'evaluator' tasks, but there is at most one"):
        _tf_resolver({"worker": ["w0:1"], "evaluator": ["e0:1", "e1:1"]}, "worker", 0)


@pytest.mark.parametrize("job_value", ["w0:1", ["w0:1", 2222], {"0": "w0:1"}])
def test_job_value_that_is_not_a_list_of_strings_raises(job_value: object) -> None:
    with _raises("TF_CONFIG cluster['worker'] must be a list of 'host:port' strings"):
        _tf_resolver({"worker": job_value}, "worker", 0)


def test_non_string_rpc_layer_raises() -> None:
    with _raises("TF_CONFIG rpc_layer must be a string"):
        TFConfigClusterResolver(_tf_env({"worker": ["w0:1"]}, rpc_layer=1))


def test_simple_resolver_messages_name_its_arguments() -> None:
    with _raises("SimpleClusterResolver task index is out of range: the cluster has 1 'chief' task, "
                 "so the index must be 0."):
        SimpleClusterResolver(CHIEF_AND_WORKERS, "chief", 1)
    with _raises("ClusterSpec address cluster['worker'][0] has no port"):
        SimpleClusterResolver({"worker": ["w0"]}, "worker", 0)


# ---------------------------------------------------------------- torchrun


def test_torchrun_variables_give_rank_and_master() -> None:
    env = {**TORCHRUN_ENV, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    resolver = TorchrunClusterResolver(env)
    assert (resolver.task_type, resolver.task_id, resolver.rank, resolver.world_size) == ("worker", 1, 1, 2)
    assert (resolver.local_rank, resolver.local_world_size) == (0, 1)
    assert (resolver.master_addr, resolver.master_port, resolver.is_chief()) == ("10.0.0.1", 29400, False)
    assert not resolver.cluster_spec()


def test_torchrun_without_local_variables_takes_all_processes_as_local() -> None:
    resolver = TorchrunClusterResolver(TORCHRUN_ENV)
    assert (resolver.local_rank, resolver.local_world_size) == (1, 2)


def test_single_torchrun_process_defaults_master_to_loopback() -> None:
    resolver = TorchrunClusterResolver({"RANK": "0", "WORLD_SIZE": "1"})
    assert (resolver.master_addr, resolver.master_port, resolver.is_chief()) == ("127.0.0.1", 29500, True)


def test_rank_without_world_size_raises() -> None:
    with _raises("WORLD_SIZE is not set, but torchrun sets RANK, WORLD_SIZE"):
        TorchrunClusterResolver({"RANK": "0"})


def test_rank_not_below_world_size_raises() -> None:
    with _raises("RANK must be less than WORLD_SIZE, so it runs from 0 to 1. Fix the variables, which torchrun sets "
                 "consistently. Received: RANK=2, WORLD_SIZE=2"):
        TorchrunClusterResolver({**TORCHRUN_ENV, "RANK": "2"})


@pytest.mark.parametrize(("name", "value"), [("RANK", "one"), ("WORLD_SIZE", "2.0"), ("LOCAL_RANK", "-1")])
def test_non_integer_torchrun_variable_raises(name: str, value: str) -> None:
    with _raises(f"{name} must be an integer of at least"):
        TorchrunClusterResolver({**TORCHRUN_ENV, name: value})


def test_missing_master_port_for_several_processes_raises() -> None:
    env = {k: v for k, v in TORCHRUN_ENV.items() if k != "MASTER_PORT"}
    with _raises("MASTER_PORT is not set"):
        TorchrunClusterResolver(env)


def test_missing_master_addr_for_several_processes_raises() -> None:
    env = {k: v for k, v in TORCHRUN_ENV.items() if k != "MASTER_ADDR"}
    with _raises("MASTER_ADDR is not set"):
        TorchrunClusterResolver(env)


def test_master_port_out_of_range_raises() -> None:
    with _raises("MASTER_PORT must be an integer from 1 to 65535"):
        TorchrunClusterResolver({**TORCHRUN_ENV, "MASTER_PORT": "70000"})


def test_local_rank_not_below_local_world_size_raises() -> None:
    with _raises("LOCAL_RANK must be less than LOCAL_WORLD_SIZE"):
        TorchrunClusterResolver({**TORCHRUN_ENV, "LOCAL_WORLD_SIZE": "1"})


# ---------------------------------------------------------------- SLURM


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("gpu5", ["gpu5"]),
        ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[098-100]-ib", ["n098-ib", "n099-ib", "n100-ib"]),
        ("r[1-2]n[1,3]", ["r1n1", "r1n3", "r2n1", "r2n3"]),
    ],
)
def test_nodelist_expands_in_slurm_order(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist, "SLURM_JOB_NODELIST") == hosts


def test_tasks_per_node_expands_repeats() -> None:
    assert expand_tasks_per_node("2(x3),1", "SLURM_TASKS_PER_NODE") == [2, 2, 2, 1]


def test_slurm_variables_give_rank_local_rank_and_master() -> None:
    resolver = SlurmClusterResolver(SLURM_ENV)
    assert (resolver.task_type, resolver.task_id, resolver.rank, resolver.world_size) == ("worker", 3, 3, 4)
    assert (resolver.local_rank, resolver.local_world_size) == (1, 2)
    # 15000 + 123456 % 20000: every task of job 123456 derives the same port.
    assert (resolver.master_addr, resolver.master_port) == ("node01", 18456)
    assert not resolver.cluster_spec()


def test_slurm_uneven_nodes_use_this_nodes_task_count() -> None:
    env = {**SLURM_ENV, "SLURM_NTASKS": "5", "SLURM_PROCID": "4", "SLURM_JOB_NODELIST": "a,b[1-2]",
           "SLURM_TASKS_PER_NODE": "2(x2),1"}
    resolver = SlurmClusterResolver(env)
    assert (resolver.local_rank, resolver.local_world_size, resolver.master_addr) == (0, 1, "a")


def test_slurm_step_variables_win_over_job_variables() -> None:
    env = {**SLURM_ENV, "SLURM_STEP_NODELIST": "x[1-4]", "SLURM_STEP_TASKS_PER_NODE": "1(x4)",
           "SLURM_LOCALID": "0", "SLURM_NODEID": "3"}
    resolver = SlurmClusterResolver(env)
    assert (resolver.master_addr, resolver.local_rank, resolver.local_world_size) == ("x1", 0, 1)


def test_slurm_ntasks_per_node_gives_even_layout() -> None:
    env = {k: v for k, v in SLURM_ENV.items() if k != "SLURM_TASKS_PER_NODE"}
    resolver = SlurmClusterResolver({**env, "SLURM_NTASKS_PER_NODE": "2"})
    assert (resolver.local_rank, resolver.local_world_size) == (1, 2)


def test_slurm_port_argument_beats_master_port_beats_job_id() -> None:
    assert SlurmClusterResolver({**SLURM_ENV, "MASTER_PORT": "4000"}, port=5000).master_port == 5000
    assert SlurmClusterResolver({**SLURM_ENV, "MASTER_PORT": "4000"}).master_port == 4000


@pytest.mark.parametrize(
    ("nodelist", "problem"),
    [
        ("node[01-03", "a '[' is never closed"),
        ("node01]", "a ']' has no matching '['"),
        ("node[1-[2]]", "brackets are nested"),
        ("node[3-1]", "the range '3-1' runs backwards"),
        ("node[a-b]", "[a-b] holds 'a-b', which is not a number"),
        ("node1,,node2", "it has an empty host name"),
    ],
)
def test_malformed_nodelist_raises(nodelist: str, problem: str) -> None:
    with _raises(f"SLURM_JOB_NODELIST is not a valid SLURM nodelist: {problem}"):
        SlurmClusterResolver({**SLURM_ENV, "SLURM_JOB_NODELIST": nodelist})


def test_procid_not_below_ntasks_raises() -> None:
    with _raises("SLURM_PROCID must be less than SLURM_NTASKS, so it runs from 0 to 3. Start the tasks with srun, "
                 "which sets consistent values. Received: SLURM_PROCID=4, SLURM_NTASKS=4"):
        SlurmClusterResolver({**SLURM_ENV, "SLURM_PROCID": "4"})


def test_slurm_layout_disagreeing_with_ntasks_raises() -> None:
    with _raises("SLURM_TASKS_PER_NODE describes 4 tasks on 2 nodes, but the job has SLURM_NTASKS=3"):
        SlurmClusterResolver({**SLURM_ENV, "SLURM_NTASKS": "3", "SLURM_PROCID": "0"})


def test_malformed_tasks_per_node_raises() -> None:
    with _raises("SLURM_TASKS_PER_NODE is not a valid SLURM tasks-per-node value: '2x2'"):
        SlurmClusterResolver({**SLURM_ENV, "SLURM_TASKS_PER_NODE": "2x2"})


def test_slurm_without_job_id_or_port_raises() -> None:
    env = {k: v for k, v in SLURM_ENV.items() if k != "SLURM_JOB_ID"}
    with _raises("SLURM_JOB_ID is not set"):
        SlurmClusterResolver(env)


def test_slurm_port_argument_out_of_range_raises() -> None:
    with _raises("port must be a port, an integer from 1 to 65535"):
        SlurmClusterResolver(SLURM_ENV, port=0)


# ---------------------------------------------------------------- resolve_cluster precedence


def test_explicit_cluster_beats_every_variable() -> None:
    env = {**_tf_env({"worker": ["w0:1"]}), **TORCHRUN_ENV, **SLURM_ENV}
    resolver = resolve_cluster(cluster_spec=CHIEF_AND_WORKERS, task_type="chief", task_id=0, environ=env)
    assert isinstance(resolver, SimpleClusterResolver)
    assert resolver.world_size == 4


def test_tf_config_beats_torchrun_and_slurm() -> None:
    env = {**_tf_env({"worker": ["w0:1"]}), **TORCHRUN_ENV, **SLURM_ENV}
    assert isinstance(resolve_cluster(environ=env), TFConfigClusterResolver)


def test_torchrun_beats_slurm() -> None:
    resolver = resolve_cluster(environ={**TORCHRUN_ENV, **SLURM_ENV})
    assert isinstance(resolver, TorchrunClusterResolver)
    assert resolver.rank == 1


def test_slurm_is_used_when_nothing_else_is_set() -> None:
    assert isinstance(resolve_cluster(environ=SLURM_ENV), SlurmClusterResolver)


def test_no_source_resolves_to_none() -> None:
    assert resolve_cluster(environ={"TF_CONFIG": "  ", "SLURM_PROCID": "0"}) is None


def test_present_but_malformed_source_raises_instead_of_falling_through() -> None:
    with _raises("TF_CONFIG is not valid JSON"):
        resolve_cluster(environ={"TF_CONFIG": "{", **TORCHRUN_ENV})


def test_task_without_cluster_spec_raises() -> None:
    with _raises("task_type and task_id name a task of a cluster, but no cluster_spec was given"):
        resolve_cluster(task_type="worker", task_id=0, environ={})


# ---------------------------------------------------------------- purity


@pytest.mark.parametrize("module_name", ["cluster.py", "_cluster_spec.py", "_slurm.py"])
def test_cluster_modules_do_not_import_torch(module_name: str) -> None:
    source = pathlib.Path(cluster_module.__file__).with_name(module_name).read_text()
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert not {name for name in imported if name.split(".")[0] == "torch"}
