"""ttrain.platforms"""
