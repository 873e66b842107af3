"""The engine's API: the one module the console imports (tests/console/test_engine_seam.py holds it to that).

- the facade: `InferenceServer`, the states its `status()` answers, traffic policies (`set_traffic_policy`);
- who asks: `Principal`, `ANONYMOUS`, `SYSTEM`; what admission decides before a version is stored (`Admissible`,
  code and ensemble-cycle checks, the model files a version holds, a repository read as the engine reads it);
- errors, each with its HTTP status: `InferaError` and the kinds the console tells apart;
- model configs: `ModelConfig`, its `config.pbtxt` and JSON forms, and the rule for model names;
- settings: the engine's environment variables, read by the console's one settings object;
- analysis: candidate configs of a model and the load sweep that measures them (the analyzer);
- monitoring: the sampler, its snapshot type, `/metrics`, and several processes' snapshots merged (the cluster view);
- front ends the runtime composes and wires in: `/v2` (ASGI and uvicorn's direct protocol), gRPC, `/v1` (OpenAI)
  with vLLM's `/tokenize` and `/detokenize`, and its `BudgetGate`
  (a Principal's `Budget`s over this process's or Redis's counters; its `UsageLedger`'s `UsageMinute`s).
"""

from engine.config.model_config import ModelConfig
from engine.config.names import MODEL_NAME_RULE, model_name_problem
from engine.config.text_format import (
    CONFIG_FILES,
    config_to_dict,
    config_to_pbtxt,
    load_json,
    merge_config,
    parse_config_json,
    parse_config_pbtxt,
    read_config_file,
    replacing_override,
)
from engine.environment.headers import read_header_rules
from engine.environment.model_control import EVERY_MODEL, read_model_control
from engine.environment.openmp import prefer_passive_wait
from engine.environment.trace import read_trace_start_up
from engine.environment.values import SettingError, parse_bool, read_text
from engine.errors import (
    CodeRefused,
    Forbidden,
    InferaError,
    InvalidArgument,
    LoadError,
    Unauthorized,
    Unavailable,
)
from engine.frontend.direct_http import DirectCycle, DirectRequestsProtocol, DirectResponder
from engine.frontend.grpc_server import GrpcFrontEnd
from engine.frontend.handlers import Reply
from engine.frontend.http import V2App
from engine.frontend.lifespan import ServiceLifespan
from engine.frontend.openai import MESSAGES_INPUT, TEXT_INPUT, TEXT_OUTPUT, TOKEN_PATHS, OpenAIApp, is_openai_path
from engine.frontend.routes import Route
from engine.llm.budget_redis import RedisCounters
from engine.llm.budgets import Budget, BudgetGate
from engine.llm.usage import UsageLedger, UsageMinute
from engine.monitoring.merge import check_snapshot, merge_figures, merge_snapshots
from engine.monitoring.prometheus import MetricsApp, check_families
from engine.monitoring.sampler import BACKLOG_SECONDS, MetricsSampler, Snapshot, narrow
from engine.serving.admission import (
    ANONYMOUS,
    MODEL_FILES,
    SYSTEM,
    Admissible,
    Principal,
    RepositoryModel,
    check_code,
    check_ensemble_cycle,
    effective_config,
    read_repository,
    version_folders,
)
from engine.serving.analysis import (
    Candidate,
    LoadPoint,
    analysis_inputs,
    candidate_config,
    concurrency_levels,
    grid_candidates,
    sweep,
)
from engine.serving.memory_budget import BudgetEvent
from engine.serving.model_status import ModelState, ModelStatus, VersionStatus
from engine.serving.repository import holds_hf_folder
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, HttpSettings, read_engine_settings, read_memory_budget
from engine.traffic.policies import TrafficPolicy, policy_from_dict
from engine.traffic.policies import check_policy as check_traffic_policy

__all__ = [
    # the facade
    "InferenceServer",
    "ModelState",
    "ModelStatus",
    "VersionStatus",
    "BudgetEvent",
    "TrafficPolicy",
    "check_traffic_policy",
    "policy_from_dict",
    # who asks, and admission
    "ANONYMOUS",
    "SYSTEM",
    "Principal",
    "Budget",
    "Admissible",
    "MODEL_FILES",
    "RepositoryModel",
    "check_code",
    "check_ensemble_cycle",
    "effective_config",
    "holds_hf_folder",
    "read_repository",
    "version_folders",
    # errors
    "CodeRefused",
    "Forbidden",
    "InferaError",
    "InvalidArgument",
    "LoadError",
    "Unauthorized",
    "Unavailable",
    # model configs and names
    "CONFIG_FILES",
    "MODEL_NAME_RULE",
    "ModelConfig",
    "config_to_dict",
    "config_to_pbtxt",
    "load_json",
    "merge_config",
    "model_name_problem",
    "parse_config_json",
    "parse_config_pbtxt",
    "read_config_file",
    "replacing_override",
    # settings
    "EngineSettings",
    "HttpSettings",
    "SettingError",
    "parse_bool",
    "read_engine_settings",
    "read_header_rules",
    "read_model_control",
    "read_memory_budget",
    "EVERY_MODEL",
    "read_text",
    "prefer_passive_wait",
    "read_trace_start_up",
    # analysis
    "Candidate",
    "LoadPoint",
    "analysis_inputs",
    "candidate_config",
    "concurrency_levels",
    "grid_candidates",
    "sweep",
    # monitoring
    "BACKLOG_SECONDS",
    "MetricsApp",
    "MetricsSampler",
    "Snapshot",
    "check_families",
    "check_snapshot",
    "merge_figures",
    "merge_snapshots",
    "narrow",
    # front ends
    "BudgetGate",
    "DirectCycle",
    "DirectRequestsProtocol",
    "DirectResponder",
    "GrpcFrontEnd",
    "MESSAGES_INPUT",
    "OpenAIApp",
    "RedisCounters",
    "Reply",
    "Route",
    "ServiceLifespan",
    "TEXT_INPUT",
    "TEXT_OUTPUT",
    "UsageLedger",
    "UsageMinute",
    "TOKEN_PATHS",
    "V2App",
    "is_openai_path",
]
