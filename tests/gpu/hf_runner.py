"""Held-out models for zero code (issue 31): Hugging Face ``transformers``' own Llama, Qwen2 and
GPT-2 (random weights, bf16, SDPA attention), code this package was never tuned to. Like
``zero_code_runner.py`` it never imports perfetto_graph_ann; run it under
``perfetto-graph-ann run`` (``test_hf_models_gpu.py`` does).

    python hf_runner.py OUT MODE MODEL     MODE: runner | runner_forward | runner_forward_frozen | runner_compiled |
                                                 runner_compiled_forward |
                                                 runner_piecewise | runner_decorated | compile |
                                                 graphed_callables
                                           MODEL: llama | qwen2 | gpt2

``runner``: one CUDA graph per batch size sharing a pool (zero_code_runner's ``Runner``, the
SGLang / vLLM pattern), replayed under the program's own torch.profiler in a shuffled order;
``runner_compiled``: the same runner capturing ``torch.compile(model)`` (no inductor CUDA graphs:
SGLang's and vLLM's way with torch.compile);
``runner_compiled_forward``: the runner calling ``torch.compile(torch.no_grad()(model.forward))``
(SGLang's own call); ``runner_piecewise``: ``model.forward`` compiled with a backend that
captures inside the compiled call (vLLM's piecewise way; zero_code_runner's ``PiecewiseRunner``);
``runner_decorated``: the model class's ``forward`` compiled as ``@torch.compile`` would
(zero_code_runner's ``DecoratedRunner``);
``compile``: ``torch.compile(model, mode="reduce-overhead")``;
``graphed_callables``: a training step through ``make_graphed_callables`` (:func:`train_step`).
The first two write the eager truth
(``truth.json``: per batch size and module path, the kernel names launched under that innermost
module) as zero_code_runner does, down the code path a capture takes (:func:`capture_path_truth`),
and the torch.profiler trace by torch's handler names.
"""
from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_code_runner import eager_truth, profile_compiled, profile_training, runner_mode  # noqa: E402

VOCAB, HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, SEQ = 4096, 512, 1408, 4, 8, 2, 16


def build(name: str) -> torch.nn.Module:
    """A small random-weight model of ``transformers``' class for ``name``, on the GPU, bf16."""
    import transformers as tf

    common = dict(vocab_size=VOCAB, use_cache=False)
    if name == "llama":
        cfg = tf.LlamaConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                             num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                             **common)
    elif name == "qwen2":
        cfg = tf.Qwen2Config(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                             num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                             **common)
    elif name == "gpt2":
        cfg = tf.GPT2Config(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=256, bos_token_id=0,
                            eos_token_id=0, **common)
    else:
        raise SystemExit(f"unknown model {name!r}: llama, qwen2 or gpt2")
    model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    return model.to("cuda", torch.bfloat16).eval()


def token_input(bs: int, seq: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (bs, seq), device="cuda")


def capture_path_truth(model: torch.nn.Module, batches, out: str) -> dict:
    """zero_code_runner's eager truth, run down the path the model takes in a capture.

    transformers asks ``is_cuda_stream_capturing()`` (and dynamo's state) to choose its code:
    while a stream captures, or dynamo traces, it builds the attention mask as a tensor instead
    of leaving it to SDPA's ``is_causal`` (seen on the H200: 10 kernels under ``model`` eagerly,
    31 in the graph). The truth must launch what the graph holds, so it runs with that question
    answered "yes"."""
    from unittest import mock

    with mock.patch("transformers.utils.import_utils.is_cuda_stream_capturing", return_value=True):
        return eager_truth(model, batches, out, seq=SEQ, make_input=token_input)


def main() -> None:
    out, mode, name = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.manual_seed(0)
    model = build(name)
    batches = [1, 2, 4]
    with torch.no_grad():
        if runner_mode(model, mode, batches, out, lambda bs: capture_path_truth(model, bs, out), seq=SEQ,
                       make_input=token_input):
            pass
        elif mode == "compile":
            profile_compiled(model, token_input(2, SEQ), out, lambda bs: capture_path_truth(model, bs, out))
        elif mode != "graphed_callables":
            raise SystemExit(f"unknown mode {mode!r}: runner, runner_forward, runner_forward_frozen, runner_compiled, "
                             "runner_compiled_forward, "
                             "runner_piecewise, runner_decorated, compile or graphed_callables")
    if mode == "graphed_callables":
        train_step(model, out)


class Logits(torch.nn.Module):
    """The model's logits alone: ``make_graphed_callables`` takes tensors out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids).logits


def train_step(model: torch.nn.Module, out: str) -> None:
    """A training step whose forward and backward are CUDA graphs (``make_graphed_callables``),
    profiled over two steps; ``names.json``: every module path of the graphed module."""
    net = Logits(model).train()
    json.dump([n or type(net).__name__ for n, _ in net.named_modules()], open(os.path.join(out, "names.json"), "w"))
    profile_training(net, token_input(2, SEQ), out, loss=lambda y: y.float().pow(2).mean())


if __name__ == "__main__":
    main()
