"""Gem Explorer: the Streamlit entry point (router + the sidebar shared by all pages, from
:mod:`sidebar`; every run timed by :mod:`state.runtime`).

Run from the project root: ``python -m streamlit run app/streamlit_app.py``.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

APP_DIR = Path(__file__).resolve().parent
# A local image: a ``:material/...`` page icon makes every browser fetch the favicon from
# fonts.gstatic.com, a request that leaves the machine (and fails offline).
ICON = APP_DIR / "icon.png"

PAGES = (
    ("views/explore.py", "Explore", ":material/hub:", "explore"),
    ("views/molecule.py", "Molecule", ":material/science:", "molecule"),
    ("views/your_data.py", "Your data", ":material/upload_file:", "your-data"),
    ("views/benchmarks.py", "Benchmarks", ":material/monitoring:", "benchmarks"),
    ("views/pipeline.py", "Pipeline", ":material/model_training:", "pipeline"),
    ("views/how_it_works.py", "How it works", ":material/school:", "how-it-works"),
)


def main() -> None:
    st.set_page_config(page_title="Gem Explorer", page_icon=str(ICON), layout="wide")
    pages = [
        st.Page(str(APP_DIR / path), title=title, icon=icon, url_path=url, default=(i == 0))
        for i, (path, title, icon, url) in enumerate(PAGES)
    ]
    nav = st.navigation(pages, position="sidebar")
    from sidebar import draw_sidebar, rerun_debug
    from state.runtime import timed_rerun

    with timed_rerun(nav.url_path) as so_far:
        draw_sidebar(nav.url_path)
        with st.sidebar:
            st.caption(
                "Gem: generative causal explanations of graph neural networks "
                "(Lin, Lan & Li, ICML 2021). Everything runs locally."
            )
        nav.run()
        rerun_debug(so_far)


main()
