"""deploy/slurm/workers-array.sbatch, submitted as it is, to a real one-node SLURM cluster
(slurmctld, slurmd and munged started by scripts/slurm.sh, which scripts/test.sh runs), against
the test PostgreSQL (the Optuna storage: the queue) and MLflow tracking server.

What a CPU-only test node needs is overridden on the sbatch command line, never in a copy of the
script: ``--gres=none`` clears the script's ``--gres=gpu:1`` (a cluster without GresTypes rejects
that request at submission), ``--cpus-per-task`` and ``--mem`` fit the node, and ``ABLATE_DEVICE=cpu``
replaces the script's ``cuda:0``. Each scenario ends with every item exactly once: one COMPLETE
Optuna trial and one FINISHED MLflow run per item, nothing RUNNING or WAITING.
"""

from __future__ import annotations

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

    def submit(self, root: Path, name: str, storage: str, tracking: str, *options: str, **env: str) -> str:
        """The shipped array script, the CPU overrides and ``options`` on the command line; the job id."""
        (root / "logs").mkdir(exist_ok=True)  # the script's --output=logs/%x-%A_%a.log (SLURM makes no folder)
        export = ",".join(["ALL", f"STUDY={name}", f"ABLATE_STORAGE={storage}", f"ABLATE_TRACKING_URI={tracking}",
                           f"ABLATE_VENV={VENV}", "ABLATE_DEVICE=cpu"])
        res = subprocess.run(["sbatch", "--parsable", *CPU_NODE, *options, f"--export={export}", str(SCRIPT)],
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
                pytest.fail(f"job {job} still has {left} after {timeout:.0f} s\n{queue_state(storage)}\n"
                            f"{logs(root)[-4000:]}")
            time.sleep(POLL_S)
        return time.monotonic() - start

    def tasks(self, job: str) -> dict[int, dict[str, str]]:
        """Array task id → its record (JobState, ExitCode, …), as scontrol keeps it for MinJobAge."""
        found = {}
        for line in self.cmd("scontrol", "-o", "show", "job", job).splitlines():
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            found[int(fields["ArrayTaskId"])] = fields
        return found

    def cancel_all(self) -> None:
        for job in self.jobs:
            self.cmd("scancel", job, check=False)


@pytest.fixture
def cluster(slurm_conf: str):
    c = Cluster(slurm_conf)
    yield c
    c.cancel_all()


def poll(predicate, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def logs(root: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()}" for p in sorted((root / "logs").glob("*.log")))


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


def wait_training(name: str, storage: str) -> dict[str, str]:
    """The first trial found training (step 2 on): its item and the array task whose worker runs
    it (the script execs the worker, so the trial's worker pid is the task's batch step)."""
    found: dict[str, str] = {}

    def training() -> bool:
        for t in optuna_trials(name, storage):
            if t.state.name == "RUNNING" and (t.user_attrs.get("step") or 0) >= 2:
                pid = int(t.user_attrs["worker"].rsplit(":", 1)[1])
                environ = Path(f"/proc/{pid}/environ").read_text().split("\0")
                env = dict(kv.split("=", 1) for kv in environ if "=" in kv)
                found.update(task=env["SLURM_ARRAY_TASK_ID"], item=t.user_attrs["item"])
                return True
        return False

    poll(training, "a task training an item", timeout=180)
    return found


def interrupted_items(name: str, storage: str) -> list[str]:
    """The items of the FAIL trials a signal stopped (their re-queued copies carry the attribute too)."""
    return [t.user_attrs["item"] for t in optuna_trials(name, storage)
            if t.state.name == "FAIL" and t.user_attrs.get("failure_kind") == "interrupted"]


# With ABLATE_FAULT=slow@2 (0.2 s a step from step 2): ~4 s a trial, long enough to signal mid-trial.
SLOW = {"train": {**procs.SPEC["train"], "steps": 20, "eval_every": 10, "log_every": 5},
        "probes": {"every": 10, "batch": 8}}


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
    queue(tmp_path, name, storage, tracking, items=2, **SLOW)
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
    assert ends[int(victim["task"])].startswith("worker interrupted (SIGTERM): re-queued 1 running item(s)"), ends
    assert ends[other] == "worker finished: {'complete': 2}", "the other task ran its item and the re-queued one"
    counts = assert_each_item_once(name, storage, tracking, items=2)
    assert interrupted_items(name, storage) == [victim["item"]], "the signalled trial, failed and re-queued"
    assert counts["trials"] == {"COMPLETE": 2, "FAIL": 1} and counts["runs"] == {"FINISHED": 2, "KILLED": 1}
    print(f"(b) scancel --batch --signal=TERM of task {victim['task']} mid-trial: done in {took:.1f} s; "
          f"{ends}; {counts}")


def test_scontrol_requeue_mid_trial_runs_the_item_on_the_task_s_return(cluster, tmp_path, postgres_db,
                                                                       mlflow_server):
    """(e) `scontrol requeue` of the only task while it trains: SLURM's SIGTERM makes the worker
    re-queue the item; the task comes back (Restarts=1) and runs it. SLURM holds a requeued job
    for 120 s (BeginTime); the test moves its start to now, as an admin may."""
    name, storage, tracking = names("e"), postgres_db, mlflow_server
    queue(tmp_path, name, storage, tracking, items=1, **SLOW)
    start = time.monotonic()
    job = cluster.submit(tmp_path, name, storage, tracking, "--array=0", ABLATE_FAULT="slow@2")
    victim = wait_training(name, storage)
    cluster.cmd("scontrol", "requeue", f"{job}_0")
    poll(lambda: cluster.active(job) == [f"{job}_0 PENDING"], "the task pending again", timeout=60)
    assert interrupted_items(name, storage) == [victim["item"]], "SLURM's SIGTERM re-queued the item"
    cluster.cmd("scontrol", "update", f"jobid={job}_0", "StartTime=now")
    cluster.wait(job, tmp_path, storage)
    took = time.monotonic() - start

    task = cluster.tasks(job)[0]
    assert (task["JobState"], task["ExitCode"], task["Restarts"]) == ("COMPLETED", "0:0", "1"), logs(tmp_path)
    assert outcomes(job, tmp_path)[0] == "worker finished: {'complete': 1}", logs(tmp_path)
    counts = assert_each_item_once(name, storage, tracking, items=1)
    assert counts["trials"] == {"COMPLETE": 1, "FAIL": 1} and counts["runs"] == {"FINISHED": 1, "KILLED": 1}
    print(f"(e) scontrol requeue of the only task mid-trial: done in {took:.1f} s; {counts}")
