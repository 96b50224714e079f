"""The peers for bench_long.py: the same model and text in bare transformers.

    python benchmarks/peer_long_forward.py sdpa  MODEL_DIR TEXT_FILE   # the plain forward (sdpa)
    python benchmarks/peer_long_forward.py eager MODEL_DIR TEXT_FILE   # output_attentions=True (eager)

sdpa: what any user pays to run the model at all. eager: what every attention
tool built on output_attentions pays: layers × heads × T² weights held at once;
it then takes layer 3 head 0's top-5 keys per query, the work attn is asked for.
"""

import json
import sys

import torch
from transformers import AutoModel, AutoTokenizer


def main() -> None:
    mode, directory, text_file = sys.argv[1:4]
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModel.from_pretrained(directory, local_files_only=True, attn_implementation=mode).eval()
    with open(text_file, encoding="utf-8") as handle:
        inputs = tokenizer(handle.read(), return_tensors="pt")
    with torch.inference_mode():
        if mode == "eager":
            attentions = model(**inputs, output_attentions=True).attentions  # layers × (1, H, T, T)
            values, indices = attentions[3][0, 0].topk(5, dim=-1)
            json.dump({"top": indices.tolist()}, sys.stdout)
        else:
            hidden = model(**inputs).last_hidden_state
            json.dump({"shape": list(hidden.shape)}, sys.stdout)


if __name__ == "__main__":
    main()
