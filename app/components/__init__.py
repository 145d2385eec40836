"""Drawing helpers of the app: graphs (pyvis, SVG, PNG), molecules (RDKit), charts (Plotly)."""
