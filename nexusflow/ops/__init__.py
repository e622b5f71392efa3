"""The operator's side: sessions over their life (listed, crashed, pruned, forgotten) and
the Prefect Automations that tell someone when a run needs them."""
