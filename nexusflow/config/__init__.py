"""What a user configures: the options every client takes, ``NEXUSFLOW_*`` settings, tool
policies, hooks, typed output, how each step runs as a task, subscription limits, the
built-in ways to wait for an answer, and the checks of what entry points are given."""
