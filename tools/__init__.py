"""Developer tools of the source checkout (not part of the installed engine): the app in a browser."""
