"""The dashboard page of `attn heads show DIR --save dashboard.html`, opened as a person would: in a real
headless Chromium, offline (test_browser.py's browser; skipped with its reason where there is none)."""

from __future__ import annotations

import pytest
from conftest import open_page, patience  # the browser and offline_page fixtures are conftest's
from store_builder import INDUCTION, build_store

from attn_cli.math.score_names import SCORES

HOSTILE = "</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    from attn_cli.analyses.store_read import open_store
    from attn_cli.render.dashboard_page import dashboard_html

    folder = tmp_path_factory.mktemp("dashboard")
    built = {
        "plain": build_store(folder / "plain"),
        "hostile": build_store(folder / "hostile", texts=9, hostile=HOSTILE),
    }
    paths = {}
    for name, store in built.items():
        paths[name] = folder / f"{name}.html"
        paths[name].write_text(dashboard_html(open_store(store.path)), encoding="utf-8")
    paths["store"] = built["plain"].path
    return paths


def rows(page) -> list[str]:
    return page.locator("#heads tbody tr td.name").all_text_contents()


def test_the_finder_sorts_by_induction_and_a_click_opens_the_head(offline_page, pages):
    page, requests, errors = offline_page
    open_page(page, pages["plain"])
    assert page.locator("#heads tbody tr").count() == 72
    assert page.locator("#heads thead th.score").count() == len(SCORES)
    page.locator("th[data-score='induction']").click()
    assert rows(page)[0] == "1.4"  # the planted induction head first
    values = [
        float(v.replace("-", "nan") or "nan")
        for v in page.locator("#heads tbody tr td.num:nth-child(5)").all_text_contents()
    ]
    assert values == sorted(values, reverse=True)
    page.locator("th[data-score='induction']").click()  # again: lowest first
    assert rows(page)[-1] == "1.4"
    page.locator("th[data-score='induction']").click()
    page.locator("#heads tbody tr").first.click()
    assert page.locator("#head-title").text_content() == "layer 1 · head 4 · induction"
    assert page.locator("#histograms .hist").count() == len(SCORES)
    assert page.locator("#histograms .hist.chosen").get_attribute("data-score") == "induction"
    assert page.locator("#examples-top .example").count() == 5
    assert page.locator("#examples-decile .example").count() == 10
    assert page.locator("#examples-edge .example").count() == 5
    assert page.locator("#examples-top .example").first.locator(".tok.query").count() == 1
    assert page.url.endswith("#1.4")
    assert requests == [] and errors == []


def test_hovering_a_token_shows_its_weight(offline_page, pages):
    from attn_cli.analyses.store_read import open_store

    best = open_store(pages["store"]).examples(*INDUCTION).top["induction"][0]
    assert best.weight_on(best.query) is not None  # the builder's query is among its own keys
    page, _, errors = offline_page
    open_page(page, pages["plain"])
    page.locator("#heads tbody tr[data-layer='1'][data-head='4']").click()
    first = page.locator("#examples-top .example").first
    key = first.locator(".tok.key").first
    weight = float(key.get_attribute("data-weight"))
    query = first.locator(".tok.query").text_content()
    key.hover()
    tip = page.locator("#tip").text_content()
    assert tip == (
        f'weight of query "{query}" on "{key.text_content()}" (position {key.get_attribute("data-pos")}): {weight:.3f}'
    )
    # the query is among its own keys here, and still drawn as the query, not in a key's weight colour
    assert first.locator(".tok.query").get_attribute("style") is None
    first.locator(".tok.query").hover()
    assert page.locator("#tip").text_content().endswith(f"its weight on itself {best.weight_on(best.query):.3f}")
    first.locator(".tok:not(.key):not(.query)").first.hover()
    assert "not among the query's strongest keys" in page.locator("#tip").text_content()
    assert errors == []


def test_filters_by_layer_and_minimum_score_and_a_histogram_picks_the_examples(offline_page, pages):
    page, _, errors = offline_page
    open_page(page, pages["plain"])
    page.select_option("#layer", "0")
    assert page.locator("#heads tbody tr").count() == 12
    assert page.locator("#shown").text_content() == "12 of 72 heads"
    page.select_option("#layer", "all")
    page.select_option("#min-score", "induction")
    page.fill("#min-value", "0.5")
    assert rows(page) == ["1.4"]
    page.locator("#heads tbody tr").first.click()
    page.locator("#histograms .hist[data-score='previous_token']").click()
    assert page.locator("#examples-top h3").text_content().startswith("Top texts by previous")
    assert errors == []


def test_the_hash_opens_a_head(offline_page, pages):
    page, _, errors = offline_page
    page.goto(pages["plain"].as_uri() + "#0.2")
    page.wait_for_selector("body[data-ready='1']", timeout=patience(10) * 1000)
    assert page.locator("#head-title").text_content() == "layer 0 · head 2 · previous"
    assert errors == []


def test_a_token_cannot_break_out_of_the_page(offline_page, pages):
    page, requests, errors = offline_page
    open_page(page, pages["hostile"])
    assert page.locator("img").count() == 0 and requests == [] and errors == []
    page.locator(f"#heads tbody tr[data-layer='{INDUCTION[0]}'][data-head='{INDUCTION[1]}']").click()
    shown = page.locator("#examples .tok").all_text_contents()
    assert HOSTILE in shown  # drawn as the text it is
    assert page.locator("img").count() == 0 and errors == []
