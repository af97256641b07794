{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiIwMGVlOTkxYWEwMjQyMWQ4M2RjMTFiMmM0ZTQyMzI5NzU2NWI3MWE3N2JmYmVkNGJlNTEwM2I5ZTZhMGMxMDZkIn0sIm5hbWUiOiJkZW1vLWxldmVscy55YW1sIn1dfQ==",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "RbuNJwY/FzfZJ+jta1RNs8TF6CwO4ckLe1C1pdcxUsl2opUuHFOIEQpxzGLBA4FBvh1gjpYrDS0K5jG7+RhbDQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
