"""Serving a sweep's model over HTTP with Ray Serve: the request formats (inputs), the model
a replica loads (model), the deployment (app) and the command around it (deploy)."""
