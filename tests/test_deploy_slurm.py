"""deploy/slurm/workers-array.sbatch and workers-node.sbatch, submitted as they are, to a real one-node SLURM cluster
(slurmctld, slurmd and munged started by scripts/slurm.sh, which scripts/test.sh runs), against
the test PostgreSQL (the Optuna storage: the queue) and MLflow tracking server.

What a CPU-only test node needs is overridden on the sbatch command line, never in a copy of the
script: ``--gres=none`` clears the script's ``--gres=gpu:1`` (a cluster without GresTypes rejects
that request at submission), ``--cpus-per-task`` and ``--mem`` fit the node, and ``ABLATE_DEVICE=cpu``
replaces the script's ``cuda:0``. Each scenario ends with every item exactly once: one COMPLETE
Optuna trial and one FINISHED MLflow run per item, nothing RUNNING or WAITING.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import processes as procs
import pytest
from test_postgres import complete_per_item, optuna_trials, queue_state, trial_runs

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "deploy" / "slurm" / "workers-array.sbatch"
NODE_SCRIPT = REPO / "deploy" / "slurm" / "workers-node.sbatch"
VENV = Path(sys.executable).parent.parent  # the venv the tests run in: ABLATE_VENV of the tasks
CPU_NODE = ["--gres=none", "--cpus-per-task=1", "--mem=400M"]
POLL_S = 0.5

pytestmark = pytest.mark.slow


class Cluster:
    """sbatch / squeue / scontrol / scancel on the test cluster; cancels what it submitted at the end."""

    def __init__(self, conf: str) -> None:
        self.conf = conf
        self.jobs: list[str] = []

    def env(self, root: Path, **extra: str) -> dict[str, str]:
        return procs.env_for(root, SLURM_CONF=self.conf, ABLATE_GRACE_S="10", ABLATE_PROGRESS_S="0.5",
                             ABLATE_CHECKPOINT_DIR=str(root / "checkpoints"), PYTHONWARNINGS="ignore", **extra)

    def cmd(self, *args: str, check: bool = True) -> str:
        res = subprocess.run(args, capture_output=True, text=True, timeout=60,
                             env={**os.environ, "SLURM_CONF": self.conf})
        if check:
            assert res.returncode == 0, f"{args}: {res.stdout}{res.stderr}"
        return res.stdout

    def submit(self, root: Path, name: str, storage: str, tracking: str, *options: str,
               worker: tuple[str, ...] = (), script: Path = SCRIPT, node: tuple[str, ...] = tuple(CPU_NODE),
               **env: str) -> str:
        """A shipped script, the CPU overrides (``node``) and ``options`` on the command line, ``worker``
        (options of `ablate worker`) after the script; the job id."""
        (root / "logs").mkdir(exist_ok=True)  # the script's --output=logs/%x-%A_%a.log (SLURM makes no folder)
        export = ",".join(["ALL", f"STUDY={name}", f"ABLATE_STORAGE={storage}", f"ABLATE_TRACKING_URI={tracking}",
                           f"ABLATE_VENV={VENV}", "ABLATE_DEVICE=cpu"])
        res = subprocess.run(["sbatch", "--parsable", *node, *options, f"--export={export}", str(script), *worker],
                             cwd=root, env=self.env(root, **env), capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, f"sbatch: {res.stdout}{res.stderr}"
        job = res.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def active(self, job: str) -> list[str]:
        """The job's tasks still pending or running (squeue shows no ended one)."""
        return self.cmd("squeue", "-h", "-j", job, "-o", "%i %T", check=False).split("\n")[:-1]

    def wait(self, job: str, root: Path, storage: str, timeout: float = 240) -> float:
        """Seconds until every task of the job has ended."""
        start = time.monotonic()
        while self.active(job):
            if time.monotonic() - start > timeout:
                left = self.active(job)
                pytest.fail(f"job {job} still has {left} after {timeout:.0f} s\n{self.why()}\n"
                            f"{queue_state(storage)}\n{logs(root)[-4000:]}")
            time.sleep(POLL_S)
        return time.monotonic() - start

    def why(self) -> str:
        """What SLURM says of its queue and node, and the end of its controller's log: for a
        failure's message (a task left PENDING says why only here)."""
        queue = self.cmd("squeue", "-h", "-o", "%i %T %r", check=False)
        node = self.cmd("sinfo", "-h", "-N", "-o", "%N %T %E", check=False)
        log = Path(self.conf).parent / "log" / "slurmctld.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.is_file() else "(no log)"
        return f"squeue (id, state, reason):\n{queue}sinfo (node, state, reason):\n{node}slurmctld.log:\n{tail}"

    def records(self, job: str) -> list[dict[str, str]]:
        """The job's records (JobState, ExitCode, …; one per array task), as scontrol keeps them for MinJobAge."""
        return [dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
                for line in self.cmd("scontrol", "-o", "show", "job", job).splitlines()]

    def tasks(self, job: str) -> dict[int, dict[str, str]]:
        """Array task id → its record."""
        return {int(fields["ArrayTaskId"]): fields for fields in self.records(job)}

    def node(self) -> tuple[str, str]:
        """The cluster's node: its name and state (idle, mixed, draining, drained, …)."""
        name, state = self.cmd("sinfo", "-h", "-N", "-o", "%N %T").split()[:2]
        return name, state

    def cancel_all(self) -> None:
        for job in self.jobs:
            self.cmd("scancel", job, check=False)


def _held(conf: str, exclusive: bool):
    """The cluster, under a lock shared by the tests (run by several pytest-xdist workers at once)
    that leave the node alone, exclusive for one that drains it or takes it whole (--exclusive):
    that would stall the others' tasks."""
    with open(Path(conf).parent / "ablate-tests.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        c = Cluster(conf)
        try:
            yield c
        finally:
            c.cancel_all()
            if exclusive and c.node()[1].startswith(("drain", "down")):
                # A node a failed test left out of service would fail every later test with it:
                # that test's own failure says what happened.
                c.cmd("scontrol", "update", f"nodename={c.node()[0]}", "state=resume", check=False)


@pytest.fixture
def cluster(slurm_conf: str):
    yield from _held(slurm_conf, exclusive=False)


@pytest.fixture
def whole_cluster(slurm_conf: str):
    yield from _held(slurm_conf, exclusive=True)


def step_daemons(job: str) -> list[int]:
    """The pids of the slurmstepd processes still serving ``job`` (its first array task has the
    array's own id) on this one-node cluster."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(f"slurmstepd: [{job}.".encode()):
                found.append(int(entry))
    return found


def poll(predicate, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def logs(root: Path) -> str:
    """The tasks' logs, then the last lines of the SLURM daemons' own: a task that ends FAILED
    without a line of its own (seen once under load, after a requeue) is explained only there."""
    said = [f"== {p.name}\n{p.read_text()}" for p in sorted((root / "logs").glob("*.log"))]
    conf = os.environ.get("ABLATE_TEST_SLURM")
    for daemon in ("slurmctld", "slurmd") if conf else ():
        log = Path(conf).parent / "log" / f"{daemon}.log"
        if log.is_file():  # slurmd logs at debug (scripts/slurm.sh): its slurmstepds' chatter left out
            lines = [x for x in log.read_text(errors="replace").splitlines() if not ("] [" in x and "debug:" in x)]
            said.append(f"== {daemon}.log (last 40 lines)\n" + "\n".join(lines[-40:]))
    return "\n".join(said)


def queue(root: Path, name: str, storage: str, tracking: str, items: int, **spec) -> None:
    """`ablate run spec.yaml --workers 0`: the study's items queued, none run here."""
    procs.write_spec(root, name=name, seeds=items, **spec)
    res = procs.ablate(root, "run", "spec.yaml", "--workers", "0", "--storage", storage, "--tracking-uri", tracking)
    assert res.returncode == 0 and f"({items} newly queued)" in res.stdout, res.stdout + res.stderr


def assert_each_item_once(name: str, storage: str, tracking: str, items: int) -> dict[str, Counter]:
    """One COMPLETE trial and one FINISHED run per item, nothing left RUNNING or WAITING; the counts."""
    trials = optuna_trials(name, storage)
    states = Counter(t.state.name for t in trials)
    assert not states["RUNNING"] and not states["WAITING"], states
    per_item = complete_per_item(trials)
    assert len(per_item) == items and set(per_item.values()) == {1}, per_item
    _, _, runs, all_runs = trial_runs(name, tracking)
    assert not [r for r in all_runs if r.info.status == "RUNNING"], [r.info for r in all_runs]
    finished = Counter((r.data.tags["ablate.cell_id"], r.data.tags["ablate.seed"], r.data.tags["ablate.phase"])
                       for r in runs if r.info.status == "FINISHED")
    assert len(finished) == items and set(finished.values()) == {1}, finished
    recorded = {t.user_attrs.get("mlflow_run_id") for t in trials if t.state.name == "COMPLETE"}
    assert {r.info.run_id for r in runs if r.info.status == "FINISHED"} == recorded
    return {"trials": states, "runs": Counter(r.info.status for r in runs)}


def names(tag: str) -> str:
    return f"slurm-{tag}-{uuid.uuid4().hex[:8]}"


def outcomes(job: str, root: Path) -> dict[int, str]:
    """Array task → the last line of its log, where the script's --output puts it (relative to the
    submission directory)."""
    found = {}
    for log in (root / "logs").glob(f"ablate-workers-{job}_*.log"):
        lines = log.read_text().strip().splitlines()
        found[int(log.stem.rsplit("_", 1)[1])] = lines[-1] if lines else ""
    return found


def wait_training(name: str, storage: str, step: int = 2) -> dict[str, str]:
    """The first trial found training (at ``step`` or later): its item, its worker's pid and the
    array task whose worker runs it (the script execs the worker, so the trial's worker pid is the
    task's batch step)."""
    found: dict[str, str] = {}

    def training() -> bool:
        for t in optuna_trials(name, storage):
            if t.state.name == "RUNNING" and (t.user_attrs.get("step") or 0) >= step:
                pid = int(t.user_attrs["worker"].rsplit(":", 1)[1])
                environ = Path(f"/proc/{pid}/environ").read_text().split("\0")
                env = dict(kv.split("=", 1) for kv in environ if "=" in kv)
                found.update(task=env["SLURM_ARRAY_TASK_ID"], item=t.user_attrs["item"], pid=str(pid))
                return True
        return False

    poll(training, "a task training an item", timeout=180)
    return found


def interrupted_items(name: str, storage: str) -> list[str]:
    """The items of the FAIL trials a signal stopped (their re-queued copies carry the attribute too)."""
    return [t.user_attrs["item"] for t in optuna_trials(name, storage)
            if t.state.name == "FAIL" and t.user_attrs.get("failure_kind") == "interrupted"]


def checkpoint_step(root: Path, name: str) -> int:
    """The step of the study's one resume checkpoint (under the tests' ABLATE_CHECKPOINT_DIR)."""
    import torch

    found = sorted((root / "checkpoints" / name).glob("*.pt"))
    assert len(found) == 1, found
    return torch.load(found[0], weights_only=False)["step"]


def trained_from_scratch_by(mark: Path) -> int:
    """The pid of the last process that trained step 1: ``STEP1`` faults (a pause of 0 s at step 1)
    write it to the ``ABLATE_FAULT_MARK`` file, so a worker that resumes from a checkpoint leaves
    the interrupted worker's pid there."""
    return int(mark.read_text())


def worker_pid(trial) -> int:
    return int(trial.user_attrs["worker"].rsplit(":", 1)[1])


# With ABLATE_FAULT=slow@2 (0.2 s a step from step 2): ~4 s a trial, long enough to signal mid-trial.
SLOW = {"train": {**procs.SPEC["train"], "steps": 20, "eval_every": 10, "log_every": 5},
        "probes": {"every": 10, "batch": 8}}
# 40 slow steps (~8 s), a checkpoint every 5: signalled from step 7 on, a trial has one to resume from.
RESUMABLE = {"train": {**procs.SPEC["train"], "steps": 40, "eval_every": 20, "log_every": 5},
             "probes": {"every": 20, "batch": 8}}
CHECKPOINTS = ("--checkpoint-every", "5")
STEP1 = {"ABLATE_FAULT_PAUSE_S": "0"}  # with pause@1 in ABLATE_FAULT: marks who trained step 1


def test_array_job_larger_than_the_queue_runs_every_item_once(cluster, tmp_path, postgres_db, mlflow_server):
    """(a) Queue from the 'login node', submit three tasks for two items, wait: the study is done,
    each item once; (c) the task left without an item waits for the running ones, then exits 0."""
    name, storage, tracking = names("a"), postgres_db, mlflow_server
    queue(tmp_path, name, storage, tracking, items=2)
    job = cluster.submit(tmp_path, name, storage, tracking, "--array=0-2")
    took = cluster.wait(job, tmp_path, storage)

    tasks = cluster.tasks(job)
    assert {k: (t["JobState"], t["ExitCode"]) for k, t in tasks.items()} == \
        {k: ("COMPLETED", "0:0") for k in range(3)}, logs(tmp_path)
    ends = outcomes(job, tmp_path)
    assert sorted(ends) == [0, 1, 2] and all(e.startswith("worker finished: ") for e in ends.values()), ends
    assert "worker finished: {}" in ends.values(), f"two items, three tasks: one runs none ({ends})"
    counts = assert_each_item_once(name, storage, tracking, items=2)
    assert counts["trials"] == {"COMPLETE": 2} and counts["runs"] == {"FINISHED": 2}
    spans = {k: (t["StartTime"][-8:], t["EndTime"][-8:]) for k, t in tasks.items()}
    print(f"(a, c) array 0-2, 2 items: job ended in {took:.1f} s; {ends}; {counts}; tasks ran {spans}")


def test_scancel_term_mid_trial_requeues_the_item(cluster, tmp_path, postgres_db, mlflow_server):
    """(b) `scancel --batch --signal=TERM` of the task running a trial: the worker re-queues the item
    and exits 143, the other task runs it; the study completes with every item once."""
    name, storage, tracking = names("b"), postgres_db, mlflow_server
    # 40 slow steps (~8 s): under a loaded CI the ~4-s trials of SLOW had ended before the signal came.
    queue(tmp_path, name, storage, tracking, items=2, **RESUMABLE)
    start = time.monotonic()
    job = cluster.submit(tmp_path, name, storage, tracking, "--array=0-1", ABLATE_FAULT="slow@2")
    victim = wait_training(name, storage)
    # --batch: without it `scancel --signal` signals the job's steps only, and this job has none.
    cluster.cmd("scancel", "--batch", "--signal=TERM", f"{job}_{victim['task']}")
    cluster.wait(job, tmp_path, storage)
    took = time.monotonic() - start

    tasks, ends = cluster.tasks(job), outcomes(job, tmp_path)
    other = 1 - int(victim["task"])
    assert (tasks[int(victim["task"])]["JobState"], tasks[int(victim["task"])]["ExitCode"]) == ("FAILED", "143:0")
    assert (tasks[other]["JobState"], tasks[other]["ExitCode"]) == ("COMPLETED", "0:0"), logs(tmp_path)
    assert ends[int(victim["task"])].startswith("worker interrupted (SIGTERM): re-queued 1 running item:"), ends
    assert ends[other] == "worker finished: {'complete': 2}", "the other task ran its item and the re-queued one"
    counts = assert_each_item_once(name, storage, tracking, items=2)
    assert interrupted_items(name, storage) == [victim["item"]], "the signalled trial, failed and re-queued"
    assert counts["trials"] == {"COMPLETE": 2, "FAIL": 1} and counts["runs"] == {"FINISHED": 2, "KILLED": 1}
    print(f"(b) scancel --batch --signal=TERM of task {victim['task']} mid-trial: done in {took:.1f} s; "
          f"{ends}; {counts}")


def test_scontrol_requeue_mid_trial_resumes_the_item_on_the_task_s_return(cluster, tmp_path, postgres_db,
                                                                          mlflow_server):
    """(e) `scontrol requeue` of the only task while it trains: SLURM's SIGTERM makes the worker
    re-queue the item; the task comes back (Restarts=1) and resumes it from its checkpoint (its
    worker never trains step 1). SLURM holds a requeued job for 120 s (BeginTime); the test moves
    its start to now, as an admin may."""
    name, storage, tracking = names("e"), postgres_db, mlflow_server
    queue(tmp_path, name, storage, tracking, items=1, **RESUMABLE)
    mark = tmp_path / "step1.mark"
    start = time.monotonic()
    job = cluster.submit(tmp_path, name, storage, tracking, "--array=0", worker=CHECKPOINTS,
                         ABLATE_FAULT="slow@2,pause@1", ABLATE_FAULT_MARK=str(mark), **STEP1)
    victim = wait_training(name, storage, step=7)
    cluster.cmd("scontrol", "requeue", f"{job}_0")
    poll(lambda: cluster.active(job) == [f"{job}_0 PENDING"], "the task pending again", timeout=60)
    assert interrupted_items(name, storage) == [victim["item"]], "SLURM's SIGTERM re-queued the item"
    resumed_at = checkpoint_step(tmp_path, name)
    assert resumed_at >= 5, resumed_at
    cluster.cmd("scontrol", "update", f"jobid={job}_0", "StartTime=now")
    cluster.wait(job, tmp_path, storage)
    took = time.monotonic() - start

    task = cluster.tasks(job)[0]
    assert (task["JobState"], task["ExitCode"], task["Restarts"]) == ("COMPLETED", "0:0", "1"), logs(tmp_path)
    assert outcomes(job, tmp_path)[0] == "worker finished: {'complete': 1}", logs(tmp_path)
    counts = assert_each_item_once(name, storage, tracking, items=1)
    assert counts["trials"] == {"COMPLETE": 1, "FAIL": 1} and counts["runs"] == {"FINISHED": 1, "KILLED": 1}
    done = [t for t in optuna_trials(name, storage) if t.state.name == "COMPLETE"][0]
    assert worker_pid(done) != int(victim["pid"]), "the returned task runs a new worker"
    assert trained_from_scratch_by(mark) == int(victim["pid"]), "the returned task's worker resumed, not restarted"
    print(f"(e) scontrol requeue of the only task mid-trial: resumed from step {resumed_at}; done in {took:.1f} s; "
          f"{counts}")


# 20 fast steps, a checkpoint every 5: the trial reaches its commit (pause@commit) a second or two
# after its worker starts, with a checkpoint at step 15 to resume from.
QUICK_RESUMABLE = {"train": {**procs.SPEC["train"], "steps": 20, "eval_every": 10, "log_every": 5},
                   "probes": {"every": 10, "batch": 8}}
# pause@commit: the worker sleeps inside the critical section of the Optuna record (the MLflow run
# holds the results, the trial is not yet COMPLETE), where a SIGTERM waits for the section's end:
# far longer than a one-minute limit (checked every 30 s) and KillWait (5 s) together.
STUCK_IN_COMMIT = {"ABLATE_FAULT": "pause@commit", "ABLATE_FAULT_PAUSE_S": "300"}


def failed_items(name: str, storage: str, kind: str) -> list[str]:
    """The items of the FAIL trials of ``failure_kind`` ``kind``."""
    return [t.user_attrs["item"] for t in optuna_trials(name, storage)
            if t.state.name == "FAIL" and t.user_attrs.get("failure_kind") == kind]


def test_time_limit_sigkills_a_worker_that_outlives_sigterm_and_another_task_resumes_the_item(
        cluster, tmp_path, postgres_db, mlflow_server):
    """(d) A task past its --time (one minute, SLURM's unit; its controller checks limits every 30 s)
    while its worker is inside the Optuna record, where SIGTERM is deferred: SLURM's SIGTERM
    changes nothing, its SIGKILL after KillWait ends the worker between the two stores' writes
    (TIMEOUT, exit 0:9). A task submitted while the first holds the item waits for it, declares
    the silent trial ``killed`` after the grace period, re-queues it, and resumes it from the
    checkpoint. ``--signal=B:TERM@0`` drops the script's warning 120 s before the limit, which a
    one-minute limit would send at once."""
    name, storage, tracking = names("d"), postgres_db, mlflow_server
    queue(tmp_path, name, storage, tracking, items=1, **QUICK_RESUMABLE)
    mark = tmp_path / "fault.mark"
    start = time.monotonic()
    job = cluster.submit(tmp_path, name, storage, tracking, "--array=0", "--time=1", "--signal=B:TERM@0",
                         worker=CHECKPOINTS, ABLATE_FAULT_MARK=str(mark), **STUCK_IN_COMMIT)
    poll(mark.exists, "the worker in its commit", timeout=120)
    assert cluster.active(job) == [f"{job}_0 RUNNING"], ("the worker started too late for a one-minute limit",
                                                         logs(tmp_path))
    victim = int(mark.read_text())
    # Submitted now, so its worker's start-up overlaps the wait for the limit; it finds the item
    # RUNNING and waits. pause@1 (0 s): marks it, should it train from step 1.
    other = cluster.submit(tmp_path, name, storage, tracking, "--array=0", worker=CHECKPOINTS,
                           ABLATE_FAULT="pause@1", ABLATE_FAULT_MARK=str(mark), **STEP1)
    cluster.wait(job, tmp_path, storage, timeout=150)
    limited = time.monotonic() - start
    task = cluster.tasks(job)[0]
    assert (task["JobState"], task["ExitCode"]) == ("TIMEOUT", "0:9"), (task, logs(tmp_path))
    limit_exit = task["ExitCode"]
    assert not Path(f"/proc/{victim}").exists()
    log = (tmp_path / "logs" / f"ablate-workers-{job}_0.log").read_text()
    assert "DUE TO TIME LIMIT" in log and "worker interrupted" not in log, log
    resumed_at = checkpoint_step(tmp_path, name)  # the other task reaps the trial only after the grace period
    assert resumed_at == 15, resumed_at
    cluster.wait(other, tmp_path, storage)
    took = time.monotonic() - start

    task = cluster.tasks(other)[0]
    assert (task["JobState"], task["ExitCode"]) == ("COMPLETED", "0:0"), logs(tmp_path)
    assert outcomes(other, tmp_path)[0] == "worker finished: {'complete': 1}", logs(tmp_path)
    counts = assert_each_item_once(name, storage, tracking, items=1)
    assert counts["trials"] == {"COMPLETE": 1, "FAIL": 1} and counts["runs"] == {"FINISHED": 1, "KILLED": 1}
    (item,) = {t.user_attrs["item"] for t in optuna_trials(name, storage)}
    assert failed_items(name, storage, "killed") == [item], "the SIGKILLed trial, reaped as killed"
    done = [t for t in optuna_trials(name, storage) if t.state.name == "COMPLETE"][0]
    assert worker_pid(done) != victim
    assert trained_from_scratch_by(mark) == victim, "the other task resumed the item, not restarted it"
    print(f"(d) --time=1, worker stuck in its commit: TIMEOUT after {limited:.1f} s (exit {limit_exit}); "
          f"the other task resumed from step {resumed_at}; done in {took:.1f} s; {counts}")


def test_a_node_set_down_mid_trial_requeues_the_task_which_resumes_the_item(whole_cluster, tmp_path, postgres_db,
                                                                            mlflow_server):
    """(h) The node fails while its only task trains (`scontrol update state=down`): SLURM kills
    the task and, the script asking --requeue, puts it back PENDING (held 120 s after a requeue:
    the test moves its start to now, as in (e)); once the node is back (`state=resume`) the task
    runs again and resumes the item from its checkpoint; every item once."""
    cluster = whole_cluster
    name, storage, tracking = names("h"), postgres_db, mlflow_server
    queue(tmp_path, name, storage, tracking, items=1, **RESUMABLE)
    node, _ = cluster.node()
    mark = tmp_path / "step1.mark"
    start = time.monotonic()
    job = cluster.submit(tmp_path, name, storage, tracking, "--array=0", worker=CHECKPOINTS,
                         ABLATE_FAULT="slow@2,pause@1", ABLATE_FAULT_MARK=str(mark), **STEP1)
    victim = wait_training(name, storage, step=7)
    cluster.cmd("scontrol", "update", f"nodename={node}", "state=down", "reason=test")
    try:
        poll(lambda: cluster.active(job) == [f"{job}_0 PENDING"], "the task requeued", timeout=60)
        said = (Path(cluster.conf).parent / "log" / "slurmctld.log").read_text()
        assert f"requeue job JobId={job}_0({job}) due to failure of node {node}" in said, said[-2000:]
        poll(lambda: not Path(f"/proc/{victim['pid']}").exists(), "the worker gone", timeout=30)
        assert interrupted_items(name, storage) == [victim["item"]], "the kill's SIGTERM re-queued the item"
        resumed_at = checkpoint_step(tmp_path, name)
        assert resumed_at >= 5, resumed_at
    finally:
        # ReturnToService=2 (scripts/slurm.sh) returns a DOWN node to service as soon as its
        # slurmd answers, as this one does at once; a node still down is resumed by hand.
        if cluster.node()[1].startswith("down"):
            cluster.cmd("scontrol", "update", f"nodename={node}", "state=resume")
    poll(lambda: cluster.node()[1] == "idle", "the node back", timeout=30)
    # The node reads idle while its slurmd may still be ending the killed task (seen under load):
    # started again before that, the task meets itself there ("Duplicate jobid": node drained).
    # slurmd forgets the job only once its slurmstepd is gone and it sent the epilog's completion,
    # which a node set down does not wait for (a task relaunched 0.4 s after its slurmstepd ended
    # was refused: "Job 9 already running, do not launch second copy"). scripts/slurm.sh logs it.
    poll(lambda: not step_daemons(job), "the killed task's slurmstepd gone", timeout=60)
    slurmd_log = Path(cluster.conf).parent / "log" / "slurmd.log"
    poll(lambda: f"JobId={job}: sent epilog complete msg" in slurmd_log.read_text(errors="replace"),
         "slurmd done with the killed task", timeout=60)
    cluster.cmd("scontrol", "update", f"jobid={job}_0", "StartTime=now")
    cluster.wait(job, tmp_path, storage)
    took = time.monotonic() - start

    task = cluster.tasks(job)[0]
    assert (task["JobState"], task["ExitCode"], task["Restarts"]) == ("COMPLETED", "0:0", "1"), logs(tmp_path)
    assert outcomes(job, tmp_path)[0] == "worker finished: {'complete': 1}", logs(tmp_path)
    counts = assert_each_item_once(name, storage, tracking, items=1)
    assert counts["trials"] == {"COMPLETE": 1, "FAIL": 1} and counts["runs"] == {"FINISHED": 1, "KILLED": 1}
    done = [t for t in optuna_trials(name, storage) if t.state.name == "COMPLETE"][0]
    assert worker_pid(done) != int(victim["pid"]), "the requeued task runs a new worker"
    assert trained_from_scratch_by(mark) == int(victim["pid"]), "the requeued task's worker resumed, not restarted"
    print(f"(h) node set down mid-trial: the task requeued, its item re-queued; resumed from step "
          f"{resumed_at}; done in {took:.1f} s; {counts}")


def test_a_drained_node_keeps_its_running_task_and_the_study_completes_after_resume(whole_cluster, tmp_path,
                                                                                    postgres_db, mlflow_server):
    """(f) `scontrol update state=drain` while a task trains: SLURM lets it run to its end (the node
    is draining), starts no new task (pending) and, once the node is resumed, the pending task runs
    the item left; every item once."""
    cluster = whole_cluster
    name, storage, tracking = names("f"), postgres_db, mlflow_server
    queue(tmp_path, name, storage, tracking, items=2, **SLOW)
    node, _ = cluster.node()
    start = time.monotonic()
    first = cluster.submit(tmp_path, name, storage, tracking, "--array=0", worker=("--max-items", "1"),
                           ABLATE_FAULT="slow@2")
    wait_training(name, storage)
    cluster.cmd("scontrol", "update", f"nodename={node}", "state=drain", "reason=test")
    try:
        second = cluster.submit(tmp_path, name, storage, tracking, "--array=0")
        assert cluster.node()[1] == "draining"
        assert cluster.active(first) == [f"{first}_0 RUNNING"]
        cluster.wait(first, tmp_path, storage)
        task = cluster.tasks(first)[0]
        assert (task["JobState"], task["ExitCode"]) == ("COMPLETED", "0:0"), logs(tmp_path)
        assert outcomes(first, tmp_path)[0] == "worker finished: {'complete': 1}", logs(tmp_path)
        poll(lambda: cluster.node()[1] == "drained", "the node drained", timeout=30)
        pending = cluster.cmd("squeue", "-h", "-j", second, "-o", "%T %r").strip()
        assert pending.startswith("PENDING"), pending
        states = Counter(t.state.name for t in optuna_trials(name, storage))
        assert states == {"COMPLETE": 1, "WAITING": 1}, states
    finally:
        cluster.cmd("scontrol", "update", f"nodename={node}", "state=resume")
    cluster.wait(second, tmp_path, storage)
    took = time.monotonic() - start
    task = cluster.tasks(second)[0]
    assert (task["JobState"], task["ExitCode"]) == ("COMPLETED", "0:0"), logs(tmp_path)
    assert outcomes(second, tmp_path)[0] == "worker finished: {'complete': 1}", logs(tmp_path)
    counts = assert_each_item_once(name, storage, tracking, items=2)
    assert counts["trials"] == {"COMPLETE": 2} and counts["runs"] == {"FINISHED": 2}
    print(f"(f) drain mid-trial: the running task finished its item, the new one waited ({pending}); "
          f"after resume done in {took:.1f} s; {counts}")


def test_workers_node_script_runs_several_workers_on_a_node(whole_cluster, tmp_path, postgres_db, mlflow_server):
    """(g) workers-node.sbatch as shipped: one srun task on the node (--nodes=1 here), two workers
    in it (ABLATE_WORKERS_PER_NODE, no GPUs to count), --exclusive; they share the items."""
    cluster = whole_cluster
    name, storage, tracking = names("g"), postgres_db, mlflow_server
    queue(tmp_path, name, storage, tracking, items=3)
    start = time.monotonic()
    job = cluster.submit(tmp_path, name, storage, tracking, script=NODE_SCRIPT,
                         node=("--nodes=1", "--gres=none", "--cpus-per-task=2"), ABLATE_WORKERS_PER_NODE="2")
    cluster.wait(job, tmp_path, storage)
    took = time.monotonic() - start
    (record,) = cluster.records(job)
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), logs(tmp_path)
    log = (tmp_path / "logs" / f"ablate-nodes-{job}.log").read_text()
    ends = [line for line in log.splitlines() if line.startswith("worker finished: ")]
    assert len(ends) == 2, log
    counts = assert_each_item_once(name, storage, tracking, items=3)
    assert counts["trials"] == {"COMPLETE": 3} and counts["runs"] == {"FINISHED": 3}
    workers = Counter(t.user_attrs["worker"] for t in optuna_trials(name, storage))
    print(f"(g) workers-node.sbatch, 2 workers on one node, 3 items: done in {took:.1f} s; {ends}; "
          f"items per worker {sorted(workers.values())}; {counts}")
