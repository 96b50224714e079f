"""`attn circuits`: every head's QK and OV circuits and how the heads compose, from the weights alone."""

from __future__ import annotations

from attn_cli.cli.common import registered_view, run_and_emit, save_figure
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model
from attn_cli.cli.output import Output, figure_help, writes_output

EPILOG = (
    "Row vectors, as TransformerLens: QK = W_Q·W_Kᵀ and OV = W_V·W_O per head (d_model × d_model, kept as "
    "their d_head-wide factors). σ: singular values. copy: Σλ/Σ|λ| over the eigenvalues of W_E·OV·W_U. "
    "content/position: shares of the mean square of the direct-path score (e+p)·QK·(e'+p')ᵀ in its "
    "token·token and position·position terms (learned positions only).\n\n"
    "Composition of writer w into reader r: Q ‖OV_w·QK_r‖, K ‖OV_w·QK_rᵀ‖, V ‖OV_w·OV_r‖, each over "
    "‖OV_w‖·‖R_r‖ (Frobenius; Elhage et al. 2021), for w in an earlier layer. Weights are processed as "
    "TransformerLens loads them: norms folded, writing weights and W_U centred.\n\n"
    "Examples:\n\n"
    "  attn circuits --model ./my-gpt2\n\n"
    "  attn circuits --model ./my-gpt2 --json | jq '.composition.k.top'\n\n"
    "  attn circuits --save circuits.html"
)


@loads_model
@writes_output(save=figure_help("the Q-, K- and V-composition grids and each head's copying score"), scale=False)
def circuits_command(
    loading: Loading = Loading(),
    out: Output = Output(),
) -> None:
    """Every head's QK and OV circuits, copying score and positional split, and the heads' composition."""
    with user_errors():
        json_wanted = out.check()

        def run(progress, lazy: bool):
            return loading.load().circuits()

        run_and_emit(
            run,
            label=loading.label,
            json_wanted=json_wanted,
            output=out.output,
            save=out.save,
            render=registered_view(),
            figure=lambda report, path: save_figure(report, path, dpi=out.dpi),
        )
