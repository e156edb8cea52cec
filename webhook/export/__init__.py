"""What quickq-guard writes for the API server itself: native admission policies (vap.py)
and the CustomResourceDefinitions of the kinds it reads (crd.py)."""
