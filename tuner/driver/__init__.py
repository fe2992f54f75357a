"""The sweep's driver process: Ray started or joined, the Tune run built and fitted, live
progress, and the Tune callbacks that keep the sweep folder's records."""
