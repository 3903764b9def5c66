"""`kubectl kct`: the clients the receivers saw, which subscriptions match them, and their latest figures.

Installed with the package as the `kubectl-kct` console script, so kubectl finds it on PATH as a plugin. It
reads the cluster with the user's kubeconfig (`cluster`), gathers and matches (`gather`), prints (`tables`),
and parses the command line (`command`).
"""
