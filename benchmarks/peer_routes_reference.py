"""bench_routes.py's reference contender: llm-transparency-tool's own routes pipeline, timed call by call in a
worker process that loads the model once. attn's process never imports the reference (CC BY-NC 4.0: it is run
from its own checkout, never copied here); bench_routes.py starts this script with the checkout and its pins on
PYTHONPATH, as tests/fixtures/routes/make_fixture.py runs it:

    PYTHONPATH=PINS:CHECKOUT python benchmarks/peer_routes_reference.py MODEL_DIR TEXT_FILE POSITION THRESHOLD [THREADS]

PINS holds what the reference imports and attn's environment lacks or has at other versions (einops; jaxtyping
0.2.25 with typeguard 2.13.3, which its env.yaml pins). The TransparentLlm is make_fixture.py's `LabLlm` (a plain
transformers forward of a Llama, eager attention, its decomposed attention computed with torch), imported from
there, not written again, for a LlamaModel (no LM head, like the forward bench_routes times: `Headless` gives it
the `.model.layers` LabLlm reads of a LlamaForCausalLM, so no head runs); for a GPT2Model, `Gpt2Llm` below, the
same reads from GPT-2's blocks.

It prints {"tokens": T} once loaded; then for each line "run" on stdin it runs the whole pipeline once, as the
reference's app does after the user submits a sentence (tokenize, the forward, then build_full_graph, which asks
the adapter for each layer's decomposed attention, and build_paths_to_predictions at POSITION with THRESHOLD),
and prints {"wall_s", "cpu_s", "route": [[source, target], ...]}: its own clocks, so the pipe is not timed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, GPT2Model, LlamaModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "routes"))
from llm_transparency_tool.routes.graph import build_full_graph, build_paths_to_predictions  # noqa: E402
from make_fixture import Info, LabLlm  # noqa: E402  (the adapter; it imports the reference itself)


class Headless(torch.nn.Module):
    """A LlamaModel seen as LabLlm reads a LlamaForCausalLM (.model.layers, .config), without an LM head."""

    def __init__(self, base: LlamaModel):
        super().__init__()
        self.model, self.config = base, base.config

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)


class Gpt2Llm(LabLlm):
    """LabLlm for a GPT2Model: the same reads, from its blocks (.h) and their .attn. v is c_attn's last third of
    the normed input, b_V in; W_O^h is c_proj's rows h·D … (h+1)·D (a Conv1D: weight (in, out)); c_proj's bias
    b_O is in the attention's output, so in residual_after_attn, and in no part, as the reference has it. (The
    reference's own TransformerLens path adds b_V to hook_v, which already holds it: this adapter does not.)"""

    def __init__(self, model: GPT2Model, ids: torch.Tensor):
        self.model, self.ids = model, ids
        self.inputs, self.attn_out, self.outputs = {}, {}, {}
        hooks = []
        for index, block in enumerate(model.h):
            hooks.append(block.register_forward_pre_hook(self._keep(self.inputs, index), with_kwargs=True))
            hooks.append(block.attn.register_forward_hook(self._keep_output(self.attn_out, index)))
            hooks.append(block.register_forward_hook(self._keep_output(self.outputs, index)))
        with torch.no_grad():
            self.attentions = model(ids, output_attentions=True).attentions  # per layer (1, H, T, T)
        for hook in hooks:
            hook.remove()

    def model_info(self):
        return Info(len(self.model.h))

    @torch.no_grad()
    def decomposed_attn(self, batch_i, layer):
        block = self.model.h[layer]
        d, heads = self.model.config.n_embd, self.model.config.n_head
        normed = block.ln_1(self.inputs[layer][batch_i])  # (T, d)
        v = block.attn.c_attn(normed)[:, 2 * d :].view(-1, heads, d // heads)  # (T, H, D)
        w_o = block.attn.c_proj.weight.view(heads, d // heads, d)  # (H, D, d): W_O^h
        pattern = self.attentions[layer][batch_i]  # (H, T i, T j)
        moved = torch.einsum("jhv,hvd->jhd", v, w_o)  # (T j, H, d)
        return torch.einsum("hij,jhd->ijhd", pattern, moved)  # (T i, T j, H, d)


def main(model_dir: str, text_file: str, position: int, threshold: float, threads: int = 0) -> None:
    if threads:
        torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if AutoConfig.from_pretrained(model_dir).model_type == "gpt2":
        model, adapter = GPT2Model.from_pretrained(model_dir, attn_implementation="eager").eval(), Gpt2Llm
        layers = len(model.h)
    else:
        model, adapter = Headless(LlamaModel.from_pretrained(model_dir, attn_implementation="eager").eval()), LabLlm
        layers = len(model.model.layers)
    text = Path(text_file).read_text(encoding="utf-8")
    print(json.dumps({"tokens": len(tokenizer(text)["input_ids"])}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        wall, cpu = time.perf_counter(), time.process_time()
        ids = tokenizer(text, return_tensors="pt")["input_ids"]
        llm = adapter(model, ids)
        graph = build_full_graph(llm, 0)
        (tree,) = build_paths_to_predictions(graph, layers, ids.shape[1], [position], threshold)
        route = sorted([u, v] for u, v in tree.edges())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(json.dumps({"wall_s": wall, "cpu_s": cpu, "route": route}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), *(int(arg) for arg in sys.argv[5:]))
