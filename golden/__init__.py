"""ttrain.golden"""
