"""attn's own analyses, registered through the same hook as an outside plugin's (data/registry.py): each one
value naming its command, its engine, its report type and how the report is drawn in the terminal, as an
SVG figure and HTML page, and in a notebook.

The package's door (attn_cli/__init__.py) hands this module to the plugin manager first; an installed
plugin's entry point comes after it. Every name is imported when the hook is called, not before: listing
the analyses imports no torch, and a report's module is loaded already when its report is drawn.
"""

from __future__ import annotations

from attn_cli.data.registry import AnalysisSpec, Figure, Measure, hookimpl


def _view(view, *, panels: bool = False, per_head: bool = True):
    """terminal(report, panels=None, per_head=False) of a view: a function of (report, panels, per_head) or
    (report, per_head), or a view class (HeadsView, CircuitsView, DiagnoseView) of the report alone."""

    def terminal(report, panels_=None, per_head_: bool = False):
        if panels:
            return view(report, panels_, per_head_)
        return view(report, per_head_) if per_head else view(report)

    return terminal


@hookimpl
def register_measures(register) -> None:
    from attn_cli.analyses.inspect import value_weighted_norms
    from attn_cli.render.page_parts import NORMS_TITLE

    register(Measure("norm", NORMS_TITLE, field="norms", column="norm", compute=value_weighted_norms))


@hookimpl
def register_analyses(register) -> None:
    from attn_cli.analyses import (
        ablate,
        alti_logit,
        attribute,
        circuits,
        compare,
        diagnose,
        diff,
        generate,
        heads,
        heads_report,
        importance,
        inspect,
        inspect_report,
        kv,
        patch,
        rollout,
        routes,
        seq2seq,
        seq2seq_generate,
        steps,
        store_read,
    )
    from attn_cli.render import (
        alti_logit_view,
        attribution_view,
        circuits_figures,
        circuits_view,
        command_figures,
        compare_view,
        diagnose_view,
        diff_view,
        figures,
        generate_view,
        heads_view,
        interventions_view,
        kv_view,
        routes_view,
        seq2seq_view,
        steps_view,
        terminal,
    )
    from attn_cli.render.figures import axis_tokens, token_texts

    register(
        AnalysisSpec(
            "inspect",
            inspect_report.InspectReport,
            run=inspect.inspect_texts,
            terminal=_inspect_terminal,
            figure=Figure(svg=figures.inspect_svg, page_data=figures.inspect_page, tokens=axis_tokens),
            help="every head's weights, scores, symmetry and top keys over one text",
        )
    )
    register(
        AnalysisSpec(
            "inspect",
            inspect_report.InspectBatch,
            run=inspect.inspect_texts,
            terminal=_view(terminal.render_batch, panels=True),
            figure=Figure(svg=figures.batch_svg, one=lambda report: report.reports[0], text=lambda report: "attn"),
            notebook=_batch_notebook,
        )
    )
    register(
        AnalysisSpec(
            "inspect",
            seq2seq.PairReport,
            run=seq2seq.inspect_pair,
            terminal=_view(seq2seq_view.render_pair, panels=True),
            figure=Figure(svg=figures.pair_svg, page_data=figures.pair_page, tokens=token_texts),
        )
    )
    register(
        AnalysisSpec(
            "compare",
            compare.CompareReport,
            run=compare.compare_text,
            terminal=_view(compare_view.render_compare),
            figure=Figure(svg=figures.compare_svg, page_data=figures.compare_page, tokens=token_texts),
        )
    )
    register(
        AnalysisSpec(
            "steps",
            steps.StepsReport,
            run=steps.walk_head,
            terminal=_view(steps_view.render_steps),
            figure=Figure(svg=figures.steps_svg, page_data=figures.steps_page, tokens=token_texts),
        )
    )
    register(
        AnalysisSpec(
            "heads",
            heads_report.HeadsReport,
            run=heads.run_heads,
            terminal=_view(heads_view.HeadsView, per_head=False),
            figure=Figure(command_figures.heads_items, command_figures.heads_page, text=_heads_text),
        )
    )
    register(
        AnalysisSpec(
            "heads",
            store_read.StoreReport,
            terminal=_view(heads_view.HeadsView, per_head=False),
            figure=Figure(command_figures.heads_items, command_figures.heads_page, text=_heads_text),
            notebook=_store_notebook,
        )
    )
    register(
        AnalysisSpec(
            "generate",
            generate.GenerateReport,
            run=generate.generate_from,
            terminal=_view(generate_view.render_generate),
            figure=Figure(
                command_figures.generate_items,
                command_figures.generate_page,
                text=lambda report: report.prompt + report.text,
                tokens=token_texts,
            ),
        )
    )
    register(
        AnalysisSpec(
            "generate",
            seq2seq_generate.PairGenerateReport,
            run=seq2seq_generate.generate_pair,
            terminal=_view(seq2seq_view.render_pair_generate),
        )
    )
    register(
        AnalysisSpec(
            "rollout",
            rollout.RolloutReport,
            run=rollout.roll_out,
            terminal=_rollout_terminal,
            figure=Figure(command_figures.rollout_items, command_figures.rollout_page, tokens=token_texts),
        )
    )
    register(
        AnalysisSpec(
            "attribute",
            attribute.AttributionReport,
            run=attribute.attribute,
            terminal=_view(attribution_view.render_attribution),
            figure=Figure(command_figures.attribution_items, command_figures.attribution_page, tokens=token_texts),
        )
    )
    register(
        AnalysisSpec(
            "attribute",
            alti_logit.LogitAttributionReport,
            run=attribute.attribute,
            terminal=_view(alti_logit_view.render_alti_logit),
            figure=Figure(alti_logit_view.alti_logit_items, tokens=token_texts),
        )
    )
    register(
        AnalysisSpec(
            "routes",
            routes.RoutesReport,
            run=routes.routes,
            terminal=_view(routes_view.render_routes, per_head=False),
            figure=Figure(svg=_routes_svg, text=lambda report: report.text),
        )
    )
    register(
        AnalysisSpec(
            "ablate",
            ablate.AblationReport,
            run=ablate.ablate,
            terminal=_view(interventions_view.AblateView, per_head=False),
            figure=Figure(
                interventions_view.ablate_items, interventions_view.ablate_page, text=lambda report: report.text
            ),
            help="what removing each head does to the model's output (zero, mean or resample ablation)",
        )
    )
    register(
        AnalysisSpec(
            "patch",
            patch.PatchReport,
            run=patch.patch,
            terminal=_view(interventions_view.PatchView, per_head=False),
            figure=Figure(
                interventions_view.patch_items, interventions_view.patch_page, text=lambda report: report.clean
            ),
            help="activation patching per head between a clean and a corrupted text",
        )
    )
    register(
        AnalysisSpec(
            "importance",
            importance.ImportanceReport,
            run=importance.head_importance,
            terminal=_view(interventions_view.ImportanceView, per_head=False),
            figure=Figure(
                svg=interventions_view.importance_svg,
                page=interventions_view.importance_page,
                text=lambda report: report.text,
            ),
            help="each head's importance to a language model's loss (the gradient of a gate) and the pruning curve",
        )
    )
    register(
        AnalysisSpec(
            "kv",
            kv.KVReport,
            run=kv.profile,
            terminal=_view(kv_view.KVView, per_head=False),
            figure=Figure(kv_view.kv_items, kv_view.kv_page, text=lambda report: report.text),
            help="how much KV cache each head needs, and what StreamingLLM and H2O keep of its attention",
        )
    )
    register(
        AnalysisSpec(
            "diff",
            diff.DiffReport,
            run=diff.diff_runs,
            terminal=_view(diff_view.render_diff),
            figure=Figure(command_figures.diff_items, command_figures.diff_page, text=_diff_text),
        )
    )
    register(
        AnalysisSpec(
            "circuits",
            circuits.CircuitsReport,
            run=circuits.run_circuits,
            terminal=_view(circuits_view.CircuitsView, per_head=False),
            figure=Figure(
                circuits_figures.circuits_items,
                circuits_figures.circuits_page,
                text=lambda report: "from the weights: no text is run",
            ),
        )
    )
    register(
        AnalysisSpec(
            "diagnose",
            diagnose.DiagnoseReport,
            run=diagnose.run_diagnose,
            terminal=_view(diagnose_view.DiagnoseView, per_head=False),
            figure=Figure(command_figures.diagnose_items, command_figures.diagnose_page, text=_diagnose_text),
        )
    )


def _routes_svg(*args):
    from attn_cli.render.routes_figure import routes_svg

    return routes_svg(*args)


def _inspect_terminal(report, panels=None, per_head: bool = False):
    """One text's heads; an image's (--image) drawn over the image unless panels are asked for by name."""
    if report.image is not None and not panels:
        from attn_cli.render.image_view import render_image_report

        return render_image_report(report, None)
    from attn_cli.render.terminal import render_report

    return render_report(report, panels, per_head)


def _rollout_terminal(report, panels=None, per_head: bool = False):
    """The rolled-out matrix; an image's drawn over the image."""
    if report.image is not None:
        from attn_cli.render.image_view import render_image_rollout

        return render_image_rollout(report)
    from attn_cli.render.rollout_view import render_rollout

    return render_rollout(report, per_head)


def _heads_text(report) -> str:
    return report.probe["text"] if report.probe else f"{report.texts:,} texts, {report.tokens:,} tokens"


def _diagnose_text(report) -> str:
    return f"{report.texts:,} text{'s' if report.texts != 1 else ''}, {report.tokens:,} tokens"


def _diff_text(report) -> str:
    return f"A: {report.a.text}  ·  B: {report.b.text}" if report.mode == "texts" else report.a.text


def _batch_notebook(report) -> str:
    """Several texts: one frame per text."""
    from attn_cli.render.notebook import notebook_html

    return "\n".join(notebook_html(single) for single in report.reports)


def _store_notebook(report) -> str:
    """A corpus store: its dashboard (head finder and head pages), as `attn heads show DIR --save x.html`."""
    from attn_cli.render.dashboard_page import dashboard_html
    from attn_cli.render.notebook import frame

    return frame(dashboard_html(report))
