"""The Jupyter server side: extension app, lifecycle service, records, handlers."""
