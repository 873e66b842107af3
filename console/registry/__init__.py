"""The model registry: registered models, their versions, uploads, the model store and the reconciler."""
