"""What outlives one script run of the app: Streamlit's caches, the browser session's values and
the server process's tuning.

This package is the only part of the app that touches ``st.cache_resource``, ``st.cache_data`` and
``st.session_state`` (``tests/app/test_engine_boundary.py`` checks it); pages and components call
its named functions and pass only widget ``key=`` arguments. One job per module:

- :mod:`state.selection`: what the sidebar selected, read by every page;
- :mod:`state.session`: the browser session's own values (picks, per-session results, the
  Molecule page's SMILES box and K);
- :mod:`state.engine_cache`: the engine's objects and results, cached per server process;
- :mod:`state.view_cache`: what drawing needs, cached per server process (layouts, figures);
- :mod:`state.runtime`: how a page run goes on the server (threads, heap, timing, profiler).

Nothing is re-exported here: import from the module that does the job.
"""
