"""The demo: a simulated 8-card node (stage.py) and its scene as the dashboard drives it (scene.py).

It is the real product over a simulated probe; only the cards are pretend.
"""
