"""The run as a pipeline: inputs -> preflight -> bundle -> images -> cells -> finish -> outcome."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path

from kit.bundle import PROVENANCE, Bundle, runner_key
from kit.bundle.redo import client_bound_hint, to_redo
from kit.cleanup import refuse_live_runs
from kit.errors import BundleError, CellsFailed, Interrupted, KitError, StorageError, SummaryFailed, storage_error
from kit.experiment.cells import CellRunner, NodeGates, gate_report
from kit.experiment.expert_pass import run_expert_passes
from kit.experiment.finish import Closing, finalize, verdicts
from kit.experiment.images import prepare_images
from kit.experiment.inputs import RunInputs, load_for_run
from kit.experiment.looks import Looks, SequentialLooks, needed_cells
from kit.experiment.options import Events, QuietEvents, RunOptions, RunResult
from kit.experiment.remeasure import measure
from kit.experiment.session import BundleSession
from kit.experiment.signals import deferred_interrupts, signals_as_interrupts
from kit.experiment.stoprule import Stopper, same_rule
from kit.experiment.workloads import Workloads
from kit.files import JsonObject
from kit.files.cell import CellFile
from kit.files.read import MAX_FILE_BYTES, read_file
from kit.files.run import FailedCell, RunFile
from kit.gates.reserve import reserved
from kit.hints import resume_command, untrusted_runner
from kit.images import ImageInfo
from kit.load import LoadSession
from kit.manifest import Manifest
from kit.plan import Cell, Plan, make_plan
from kit.plumbing.files import read_bounded
from kit.plumbing.interrupts import OutputClosed, back_to
from kit.plumbing.jsontypes import loads
from kit.runtime import Runtime
from kit.runtime.docker import DockerRuntime
from kit.runtime.process import ProcessRuntime
from kit.server_spec import register_secrets
from kit.slurm.ranks import SlurmRanksRuntime
from kit.workload import Workload, check_dataset


def default_runtime(m: Manifest) -> Runtime:
    if m.runtime == "docker":
        return DockerRuntime()
    if m.runtime == "slurm":
        return SlurmRanksRuntime.from_environment(m)  # inside an allocation of hardware.nodes nodes, or exit 2
    return ProcessRuntime()


def node_gates(runtime: Runtime) -> NodeGates | None:
    """With runtime slurm: the nodes and their gates (each node is given the manifest kit verified)."""
    if not isinstance(runtime, SlurmRanksRuntime):
        return None
    return NodeGates(runtime.nodes, runtime.node_gates)


class Experiment:
    """One run of a manifest into one bundle: the gates before anything, then every cell still to run."""

    def __init__(self, inputs: RunInputs, opts: RunOptions, events: Events) -> None:
        self.inputs, self.opts, self.events = inputs, opts, events
        self.m = inputs.lm.manifest
        register_secrets(self.m)  # masked in every file, log and message from here on
        self.plan = make_plan(self.m)
        self.runtime: Runtime = opts.runtime or default_runtime(self.m)
        self.nodes = node_gates(self.runtime)
        self.preflight_report: JsonObject = {}
        self.preflight_gpus: list[str] = []  # the UUIDs the preflight GPU gate checked
        self.images: dict[str, ImageInfo] = {}
        self.cells: CellRunner | None = None
        self.workload: Workload | None = None  # load.dataset, read and checked by the preflight (check_dataset)

    @property
    def failed(self) -> dict[str, FailedCell]:
        return self.cells.failed if self.cells is not None else {}

    def preflight(self, session: BundleSession | None) -> None:
        """Every gate once before anything is built, created or even written: a machine that cannot run
        the experiment stops it with exit 5 and no bundle (when resuming, the report lands in the bundle)."""
        report = gate_report(self.m, "before", session.run_id if session is not None else None, self.nodes)
        self.preflight_report = report.as_dict()
        self.preflight_gpus = [g["uuid"] for g in report.gpus]
        if session is not None:
            session.bundle.append_jsonl("gates.jsonl", self.preflight_report)
        report.raise_if_failed()

    def execute(self, session: BundleSession, *, idle: bool = False) -> str:
        """Run the cells still to run; ``idle``: a resume with none left (no gate: no server will start)."""
        if session.resumed and not idle:
            self.preflight(session)
        elif not session.resumed:
            session.bundle.append_jsonl("gates.jsonl", self.preflight_report)
            if self.opts.prepare is not None:
                self.opts.prepare(session.bundle)
            if self.opts.stop_rule is not None:  # what its looks read, vouched for by the start checkpoint
                self.opts.stop_rule.prepare(session.bundle)
            session.checkpoint("start")  # from here on, a run that never ends can be resumed
        if self.m.runtime == "docker" and not idle:
            ports = [self.m.server.port, *self.m.server.extra_ports, *self.m.gates.ports]
            mine = self.preflight_gpus if self.m.hardware.gpu_selection() is not None else "all"  # gpu_indices
            refuse_live_runs(ports=ports, gpus=mine if self.m.hardware.gpus else None, own_run=session.run_id)
        self.images = prepare_images(self.inputs.lm, session, allow_unpinned=self.opts.allow_unpinned,
                                     trust=self.inputs.trust)
        with LoadSession(cpus=self.m.load.cpus) as load:  # one set of load drivers for every cell of the run
            self.cells = CellRunner(self.m, self.plan, session.bundle, self.runtime, self.events,
                                    image_ids={a: i.image_id for a, i in self.images.items()}, nodes=self.nodes,
                                    workloads=Workloads(self.m, session.bundle, self.workload), load=load)
            try:
                self.run_cells(session)
            finally:
                self.cells.load = None  # stopped with the session: nothing after the cells may use it
        run_expert_passes(self.cells)  # manifest expert_pass: one untimed server per arm, after every timed cell
        return "complete" if not self.failed else "failed"

    def run_cells(self, session: BundleSession) -> None:
        """The cells still to run, one after another, each kept by a checkpoint; the looks may stop them early."""
        assert self.cells is not None
        # --- looks (design.sequential, or the caller's stop rule): one after each block; stop when one says so
        looks = self.stopper(session.bundle)
        todo = cells_to_run(session.bundle, needed_cells(self.m, self.plan, session.bundle))
        done = len(self.plan.cells) - len(todo)
        if done and todo:
            self.events.message(f"resuming: {done} cell(s) already complete, {len(todo)} to run")
        for line in looks.take_due() if looks is not None else []:  # resumed after a block, before its look
            self.events.message(line)
        for i, cell in enumerate(todo):
            if looks is not None and looks.stopped:
                break
            self.events.cell_started(cell, done + i + 1, len(self.plan.cells))
            status = measure(self.cells, session, cell, self.redo_limit, self.events)  # client-bound: again
            for line in looks.take_due() if looks is not None else []:  # written before the checkpoint covers it
                self.events.message(line)
            session.checkpoint("cell", cell=cell.id, status=status)  # the cell is kept, whatever comes next
            if looks is not None and looks.stopped:
                break
        # --- end looks

    @property
    def redo_limit(self) -> int:
        """design.redo_client_bound; unset, 1 where looks may stop the run (design.sequential, or a stop rule such as
        kit reproduce --until-decided: a flagged cell withholds every later look), else 0."""
        given = self.m.design.redo_client_bound
        return given if given is not None else int(self.m.design.sequential is not None or bool(self.opts.stop_rule))

    def stopper(self, bundle: Bundle) -> Stopper | None:
        """The looks that may stop this run: design.sequential's, or the stop rule RunOptions carries."""
        if self.m.design.sequential is not None:
            return SequentialLooks(Looks(self.m, self.plan, bundle))
        return self.opts.stop_rule.start(self.m, self.plan, bundle) if self.opts.stop_rule is not None else None


def cell_ok(bundle: Bundle, cell: Cell) -> bool:
    rel = f"cells/{cell.id}/cell.json"
    return bundle.exists(rel) and bundle.read(rel, CellFile).status == "ok"


def cells_to_run(bundle: Bundle, cells: tuple[Cell, ...]) -> list[Cell]:
    """The cells not yet ``ok``; an earlier attempt of one is moved aside (never deleted)."""
    todo = []
    for cell in cells:
        if cell_ok(bundle, cell):
            continue
        if bundle.exists(f"cells/{cell.id}"):
            bundle.move_failed_attempt(cell.id)
        todo.append(cell)
    return todo


def run_experiment(manifest: Path | None, opts: RunOptions, events: Events | None = None) -> RunResult:
    """Run (or resume) an experiment; whatever ends it, leaves a signed, verifiable, resumable bundle and
    no server behind."""
    try:
        return run_inputs(load_for_run(manifest, opts), opts, events)
    except OSError as e:  # a full or failing disk before the run's first checkpoint, or while resuming
        full = storage_error(e)
        if full is None:
            raise
        raise full from None


def run_inputs(inputs: RunInputs, opts: RunOptions, events: Events | None = None) -> RunResult:
    """``run_experiment`` from inputs already read and verified (``kit.experiment.inputs``)."""
    ev = events or QuietEvents()
    if opts.resume is not None:  # a run stopped by looks resumes under the same rule, or not at all
        same_rule(opts.resume, opts.stop_rule, "resume it with the command kit printed when it stopped (kit "
                  "reproduce --until-decided: kit reproduce SOURCE --resume BUNDLE --until-decided)")
    if opts.resume is not None and (done := already_complete(opts.resume, make_plan(inputs.lm.manifest),
                                                             opts.redo, inputs.lm.manifest)) is not None:
        return done  # nothing to run: no gate, no lock, no write
    key, notice = runner_key(opts.key)  # before anything runs: a bad key must not surface after hours of load
    if notice:
        ev.message(notice)
    if (untrusted := untrusted_runner(opts.trust, key.public, key.public_line())) is not None:
        ev.message(f"WARNING: {untrusted}")  # --key of a key the policy does not name: said first, and last
    exp = Experiment(inputs, opts, ev)
    exp.workload = check_dataset(exp.m.load, exp.m.model.path)  # a broken data file: exit 3 before any server starts
    if exp.m.server.scheme == "https" and not exp.m.load.request.verify_tls:  # https: loud, and in the report
        ev.message("WARNING: load.request.verify_tls is false: the server's certificate is not verified")
    if opts.resume is None:
        exp.preflight(None)  # a machine that cannot run it: exit 5, nothing built, started or written
    status: str = "failed"
    error: BaseException | None = None
    # From the bundle's start to the outcome no signal escapes: the cells take them as interrupts
    # (signals_as_interrupts lifts this hold), one that came before them interrupts the run at once, and one after
    # them waits, then is dropped: the run is ending anyway, and its outcome, with the command that resumes it, is
    # what must be said (a SIGTERM storm, review)
    with deferred_interrupts(drop=True) as pending:
        session = BundleSession.start(inputs, opts, exp.plan, key, exp.runtime)
        # a resume with every cell already measured (killed while sealing, or a `kit report` cut short) only seals
        # it: it needs no port or GPU, and another run holding them must not turn a complete bundle into a failed one
        idle = session.resumed and all(cell_ok(session.bundle, c)
                                       for c in needed_cells(exp.m, exp.plan, session.bundle))
        try:
            ev.message(f"bundle: {session.bundle.root}")  # in here: a reader gone already interrupts the run
            if pending:  # a signal while the bundle was being made: the run stops before its first cell
                raise KeyboardInterrupt
            with signals_as_interrupts(), \
                    contextlib.nullcontext() if idle else reserved(exp.m, session.run_id, session.bundle.root):
                status = exp.execute(session, idle=idle)
        except KeyboardInterrupt as e:
            back_to(pending)  # first: the cells' stretch is over, whatever its exit did (kit.plumbing.interrupts)
            status, error = "interrupted", e
        except BaseException as e:  # noqa: BLE001 - anything: finalize first, then let it out
            back_to(pending)
            status, error = "failed", storage_error(e) or e
        closing = Closing(exp.m, inputs.trust, key, exp.images, exp.failed)
        again = opts.resume_hint(session.bundle.root, key.public) if opts.resume_hint else resume_command(
            session.bundle.root, trust=opts.trust, allow_unsigned=opts.allow_unsigned,
            allow_unpinned=opts.allow_unpinned, key=opts.key, runner=key.public)  # works as printed (kit.hints)
        try:
            summary, status = finalize(session, closing, status)
        except OSError as e:  # a full or failing disk: the bundle is not sealed, its checkpoints hold what ran
            full = storage_error(e)
            if full is None:
                raise
            first = error if isinstance(error, StorageError) else full
            raise first.note(f"the bundle is not sealed, but its signed checkpoints hold every cell that completed: "
                             f"{again}") from None
        finally:
            session.unlock()
        return outcome(session, closing, status, error, summary, ev, again, untrusted)


def already_complete(root: Path, plan: Plan, redo: tuple[str, ...] = (), m: Manifest | None = None) -> RunResult | None:
    """A bundle whose run completed (sealed, summarised, every cell ok — with design.sequential, every cell of the
    blocks it ran) and, with ``redo``, no cell to re-run: the result, untouched; else None."""
    if not (root / PROVENANCE).is_file():
        return None
    run = read_file(root, "run.json", RunFile)
    bundle = Bundle(root, run.run_id)
    if run.status != "complete" or not bundle.exists("summary.json"):
        return None
    try:
        needed = plan.cells if m is None else needed_cells(m, plan, bundle)  # design.sequential: the blocks it ran
        if not all(bundle.read(f"cells/{c.id}/cell.json", CellFile).status == "ok" for c in needed):
            return None
    except BundleError:  # a cell missing or unreadable: not complete (the resume says what is wrong with it)
        return None
    if redo and to_redo(root, [c.id for c in plan.cells], redo):
        return None  # --redo client-bound: a complete bundle re-runs its flagged cells
    summary = loads(read_bounded(bundle.path("summary.json"), MAX_FILE_BYTES))
    nothing = [f"no cell is {' or '.join(redo)}: nothing to redo"] if redo else []
    return RunResult(bundle=root, status="complete", verdicts=verdicts(summary), failed_cells={},
                     notices=["the bundle is already complete: nothing to resume, nothing was changed", *nothing],
                     summary=summary)


def outcome(session: BundleSession, c: Closing, status: str, error: BaseException | None, summary: JsonObject,
            ev: Events, again: str | None = None, untrusted: str | None = None) -> RunResult:
    """The result of a run, or the one error that ended it, with where the bundle is as a note (``again``:
    the command that resumes it; ``untrusted``: why that command would be refused, and the fix)."""
    lines = verdicts(summary)
    root = session.bundle.root
    again = again or f"kit run --resume {root}"
    where = f"The bundle is consistent and resumable: {again}"
    if error is not None or c.failed:
        for line in lines:
            ev.message(line)
    if isinstance(error, OutputClosed):  # no one reads on: the command ends as SIGPIPE would end it (141)
        raise error
    if untrusted is not None:
        ev.message(f"WARNING: {untrusted}")
        where += f"\nFirst: {untrusted}"
    if isinstance(error, KeyboardInterrupt):
        raise Interrupted("interrupted.").note(where) from None
    if isinstance(error, KitError):
        raise error.note(where)
    if error is not None:
        raise error
    if c.failed:
        first = next(iter(c.failed.values()))
        cells = "; ".join(f"{cid}: {(f.reason.splitlines() or [''])[0]}" for cid, f in c.failed.items())
        raise CellsFailed(f"{len(c.failed)} cell(s) failed ({cells})", exit_code=first.exit_code,
                          hint=f"see the cells' server.log; then: {again}")
    if c.summary_error is not None:  # every cell ran, and still no verdict: never exit 0
        raise SummaryFailed(f"every cell ran, but the summary could not be computed ({c.summary_error}): no "
                            "summary, report or verdicts", hint=f"the records are kept and signed; once the cause "
                            f"is fixed (e.g. a newer kit), `{again}` computes them")
    if c.report_error is not None:  # the verdicts are computed and printed; the report the user reads is not
        raise SummaryFailed(f"every cell ran and summary.json holds the verdicts, but report.md could not be "
                            f"rendered ({c.report_error})", hint=f"the bundle is complete and signed; once the cause "
                            f"is fixed (e.g. a newer kit), {shlex.join(['kit', 'report', str(root)])} renders it")
    try:
        redo = client_bound_hint(root, again) if summary else None
    except (KitError, OSError):  # a courtesy line: it never turns a sealed, complete run into an error
        redo = None
    return RunResult(bundle=root, status=status, verdicts=lines,
                     failed_cells={cid: f.reason for cid, f in c.failed.items()}, notices=c.notices, summary=summary,
                     next_steps=[redo] if redo else [])
